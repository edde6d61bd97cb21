package main

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

func franzOpts(sec Security, bootstrap string) []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(bootstrap)}
	if sec.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(sec.TLS))
	}
	if sec.sasl() {
		opts = append(opts, kgo.SASL(scram.Auth{User: sec.User, Pass: sec.Password}.AsSha512Mechanism()))
	}
	return opts
}

func franzGo(ctx context.Context, sec Security, bootstrap, topic, group string, records int) ([]Record, error) {
	return franzGoGroup(ctx, sec, bootstrap, topic, group, records)
}

// franzGo848 reads back in a KIP-848 group (the broker assigns the partitions).
func franzGo848(ctx context.Context, sec Security, bootstrap, topic, group string, records int) ([]Record, error) {
	return franzGoGroup(ctx, sec, bootstrap, topic, group, records,
		kgo.Balancers(kgo.RangeBalancer()), kgo.ServerSideBalancer())
}

func franzGoGroup(ctx context.Context, sec Security, bootstrap, topic, group string, records int,
	groupOpts ...kgo.GroupOpt) ([]Record, error) {
	producer, err := kgo.NewClient(append(franzOpts(sec, bootstrap), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		return nil, err
	}
	batch := make([]*kgo.Record, 0, records)
	for i := 0; i < records; i++ {
		batch = append(batch, &kgo.Record{Value: []byte(value(i)),
			Headers: []kgo.RecordHeader{{Key: "secret.token", Value: []byte("x")}}})
	}
	err = producer.ProduceSync(ctx, batch...).FirstErr()
	producer.Close()
	if err != nil {
		return nil, err
	}
	opts := append(franzOpts(sec, bootstrap), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for _, opt := range groupOpts {
		opts = append(opts, opt)
	}
	consumer, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	defer consumer.Close()
	var seen []Record
	for len(seen) < records {
		fetches := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			return seen, ctx.Err()
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			return seen, errs[0].Err
		}
		fetches.EachRecord(func(r *kgo.Record) {
			headers := map[string][]byte{}
			for _, h := range r.Headers {
				headers[h.Key] = h.Value
			}
			seen = append(seen, Record{Value: string(r.Value), Headers: headers})
		})
	}
	return seen, nil
}
