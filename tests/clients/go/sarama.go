package main

import (
	"context"
	"errors"

	"github.com/IBM/sarama"
)

func saramaConfig(sec Security) *sarama.Config {
	config := sarama.NewConfig()
	if sec.TLS != nil {
		config.Net.TLS.Enable = true
		config.Net.TLS.Config = sec.TLS
	}
	if sec.sasl() {
		config.Net.SASL.Enable = true
		config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		config.Net.SASL.User, config.Net.SASL.Password = sec.User, sec.Password
		config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{} }
	}
	config.Version = sarama.V3_6_0_0 // record headers need 0.11 or later
	config.Producer.Return.Successes = true
	config.Producer.RequiredAcks = sarama.WaitForAll
	config.Consumer.Offsets.Initial = sarama.OffsetOldest
	config.Consumer.Return.Errors = true
	return config
}

func saramaCell(ctx context.Context, sec Security, bootstrap, topic, group string, records int) ([]Record, error) {
	brokers := []string{bootstrap}
	producer, err := sarama.NewSyncProducer(brokers, saramaConfig(sec))
	if err != nil {
		return nil, err
	}
	messages := make([]*sarama.ProducerMessage, 0, records)
	for i := 0; i < records; i++ {
		messages = append(messages, &sarama.ProducerMessage{Topic: topic,
			Value:   sarama.StringEncoder(value(i)),
			Headers: []sarama.RecordHeader{{Key: []byte("secret.token"), Value: []byte("x")}}})
	}
	err = producer.SendMessages(messages)
	if closeErr := producer.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumerGroup(brokers, group, saramaConfig(sec))
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	handler := &collect{want: records, done: make(chan struct{})}
	go func() {
		for err := range consumer.Errors() {
			handler.fail(err)
		}
	}()
	inner, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for inner.Err() == nil {
			if err := consumer.Consume(inner, []string{topic}, handler); err != nil &&
				!errors.Is(err, sarama.ErrClosedConsumerGroup) {
				handler.fail(err)
				return
			}
		}
	}()
	select {
	case <-handler.done:
	case <-ctx.Done():
		return handler.records(), ctx.Err()
	}
	return handler.records(), handler.err
}
