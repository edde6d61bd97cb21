package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Security is what the environment asks of a cell's connections: TLS trusting the CA in
// COMPAT_TLS_CA, and SASL/SCRAM-SHA-512 as COMPAT_SASL_USER with COMPAT_SASL_PASSWORD.
// Empty: plaintext, no SASL.
type Security struct {
	TLS      *tls.Config
	User     string
	Password string
}

func securityFromEnv() (Security, error) {
	var s Security
	if ca := os.Getenv("COMPAT_TLS_CA"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return s, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return s, fmt.Errorf("COMPAT_TLS_CA: no certificate in %s", ca)
		}
		s.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	s.User, s.Password = os.Getenv("COMPAT_SASL_USER"), os.Getenv("COMPAT_SASL_PASSWORD")
	return s, nil
}

func (s Security) sasl() bool { return s.User != "" }
