package main

import (
	"context"

	"github.com/segmentio/kafka-go"
)

func kafkaGo(ctx context.Context, bootstrap, topic, group string, records int) ([]Record, error) {
	writer := &kafka.Writer{Addr: kafka.TCP(bootstrap), Topic: topic,
		RequiredAcks: kafka.RequireAll, BatchSize: records}
	messages := make([]kafka.Message, 0, records)
	for i := 0; i < records; i++ {
		messages = append(messages, kafka.Message{Value: []byte(value(i)),
			Headers: []kafka.Header{{Key: "secret.token", Value: []byte("x")}}})
	}
	err := writer.WriteMessages(ctx, messages...)
	if closeErr := writer.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, err
	}
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{bootstrap}, GroupID: group,
		Topic: topic, StartOffset: kafka.FirstOffset})
	defer reader.Close()
	var seen []Record
	for len(seen) < records {
		message, err := reader.ReadMessage(ctx)
		if err != nil {
			return seen, err
		}
		headers := map[string][]byte{}
		for _, h := range message.Headers {
			headers[h.Key] = h.Value
		}
		seen = append(seen, Record{Value: string(message.Value), Headers: headers})
	}
	return seen, nil
}
