package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// WithTLS makes connections TLS with cfg (its RootCAs: the cluster's CA).
// A quorate node serves only TLS.
func WithTLS(cfg *tls.Config) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// WithCAFile makes connections TLS, trusting the CA certificates (PEM) in
// file: the cluster's CA, as "quorate dev" writes to
// data/credentials/ca.crt.
func WithCAFile(file string) (grpc.DialOption, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", file)
	}
	return WithTLS(&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool}), nil
}

// WithToken sends token on every call, as the metadata
// "authorization: Bearer <token>". gRPC refuses to send it over a
// connection without TLS.
func WithToken(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer(token))
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return true }
