package main

import (
	"context"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/scram"
)

func kafkaGoSASL(sec Security) (sasl.Mechanism, error) {
	if !sec.sasl() {
		return nil, nil
	}
	return scram.Mechanism(scram.SHA512, sec.User, sec.Password)
}

func kafkaGo(ctx context.Context, sec Security, bootstrap, topic, group string, records int) ([]Record, error) {
	mechanism, err := kafkaGoSASL(sec)
	if err != nil {
		return nil, err
	}
	writer := &kafka.Writer{Addr: kafka.TCP(bootstrap), Topic: topic,
		RequiredAcks: kafka.RequireAll, BatchSize: records,
		Transport: &kafka.Transport{TLS: sec.TLS, SASL: mechanism}}
	messages := make([]kafka.Message, 0, records)
	for i := 0; i < records; i++ {
		messages = append(messages, kafka.Message{Value: []byte(value(i)),
			Headers: []kafka.Header{{Key: "secret.token", Value: []byte("x")}}})
	}
	err = writer.WriteMessages(ctx, messages...)
	if closeErr := writer.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, err
	}
	dialer := &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, TLS: sec.TLS,
		SASLMechanism: mechanism}
	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{bootstrap}, GroupID: group,
		Topic: topic, StartOffset: kafka.FirstOffset, Dialer: dialer})
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
