package main

import (
	"sync"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// scramClient is the SCRAM-SHA-512 conversation Sarama asks its users to bring.
type scramClient struct {
	conversation *scram.ClientConversation
}

func (c *scramClient) Begin(user, password, authzID string) error {
	client, err := scram.SHA512.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	c.conversation = client.NewConversation()
	return nil
}

func (c *scramClient) Step(challenge string) (string, error) { return c.conversation.Step(challenge) }
func (c *scramClient) Done() bool                            { return c.conversation.Done() }

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
