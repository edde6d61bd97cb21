// Command compat-clients produces records through a Kafka bootstrap with one of three Go
// client libraries and reads them back in a consumer group of that library, for Herald's
// compatibility matrix (tests/integration/proxy/test_compatibility.py).
//
//	compat-clients LIBRARY BOOTSTRAP TOPIC RECORDS GROUP
//
// LIBRARY is franz-go, franz-go-kip848 (a KIP-848 group), sarama or kafka-go. Records "0".."RECORDS-1" are produced, each with
// the header secret.token=x (which Herald's fetch chain strips); each record read back is
// printed as one JSON line {"value": ..., "headers": {name: base64 value}}. Errors go to
// stderr with a non-zero exit. COMPAT_TLS_CA, COMPAT_SASL_USER and COMPAT_SASL_PASSWORD ask for
// TLS and SASL/SCRAM-SHA-512 (security.go).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Record is one record as a library read it back.
type Record struct {
	Value   string            `json:"value"`
	Headers map[string][]byte `json:"headers"`
}

// Cell produces `records` records to topic and reads them back in group, connecting as sec
// says.
type Cell func(ctx context.Context, sec Security, bootstrap, topic, group string,
	records int) ([]Record, error)

var cells = map[string]Cell{
	"franz-go":        franzGo,
	"franz-go-kip848": franzGo848,
	"sarama":          saramaCell,
	"kafka-go":        kafkaGo,
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: compat-clients LIBRARY BOOTSTRAP TOPIC RECORDS GROUP")
		os.Exit(2)
	}
	cell, ok := cells[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "compat-clients: unknown library %q\n", os.Args[1])
		os.Exit(2)
	}
	records, err := strconv.Atoi(os.Args[4])
	if err != nil || records < 1 {
		fmt.Fprintf(os.Stderr, "compat-clients: RECORDS must be a positive number, not %q\n", os.Args[4])
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	sec, err := securityFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "compat-clients:", err)
		os.Exit(2)
	}
	seen, err := cell(ctx, sec, os.Args[2], os.Args[3], os.Args[5], records)
	out := json.NewEncoder(os.Stdout)
	for _, r := range seen {
		if encodeErr := out.Encode(r); encodeErr != nil {
			fmt.Fprintln(os.Stderr, "compat-clients:", encodeErr)
			os.Exit(1)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "compat-clients: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func value(i int) string { return strconv.Itoa(i) }
