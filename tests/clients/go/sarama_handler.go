package main

import (
	"sync"

	"github.com/IBM/sarama"
)

// collect is a sarama consumer group handler that keeps what it reads until it has `want`.
type collect struct {
	mu   sync.Mutex
	want int
	seen []Record
	err  error
	done chan struct{}
	once sync.Once
}

func (c *collect) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (c *collect) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (c *collect) ConsumeClaim(session sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for message := range claim.Messages() {
		headers := map[string][]byte{}
		for _, h := range message.Headers {
			headers[string(h.Key)] = h.Value
		}
		session.MarkMessage(message, "")
		c.mu.Lock()
		c.seen = append(c.seen, Record{Value: string(message.Value), Headers: headers})
		full := len(c.seen) >= c.want
		c.mu.Unlock()
		if full {
			c.once.Do(func() { close(c.done) })
		}
	}
	return nil
}

func (c *collect) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.once.Do(func() { close(c.done) })
}

func (c *collect) records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.seen...)
}
