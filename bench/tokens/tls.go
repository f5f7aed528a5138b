package main

import (
	"crypto/tls"
	"fmt"
	"os"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// benchTLS is the TLS material of the TLS systems: one CA, a certificate
// per server (named for 127.0.0.1) and a client certificate, as files for
// the servers and as a configuration for the clients.
type benchTLS struct {
	dir    string
	caFile string
	ca     *pki.CA
	client tls.Certificate
}

func newBenchTLS(dir string) (*benchTLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create certificate directory: %w", err)
	}
	ca, err := pki.NewCA("bench CA", pki.Options{})
	if err != nil {
		return nil, err
	}
	caFile, _, err := ca.Write(dir, "ca")
	if err != nil {
		return nil, err
	}
	leaf, err := ca.Issue("bench-client", []string{string(tokenapi.RoleClient)}, nil, pki.Options{})
	if err != nil {
		return nil, err
	}
	return &benchTLS{dir: dir, caFile: caFile, ca: ca, client: leaf.TLSCertificate()}, nil
}

// server writes a certificate for server name (a node ID for fencegate,
// with the peer role) and returns its files.
func (b *benchTLS) server(name string) (cert, key string, err error) {
	leaf, err := b.ca.Issue(name, []string{string(tokenapi.RolePeer)}, []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		return "", "", err
	}
	return leaf.Write(b.dir, name)
}

// fencegateClient is the token client's TLS configuration.
func (b *benchTLS) fencegateClient() *tls.Config {
	return tokenclient.ClientTLSConfig(b.ca.Pool(), b.client)
}

// etcdClient is etcd's client TLS configuration.
func (b *benchTLS) etcdClient() *tls.Config {
	return &tls.Config{RootCAs: b.ca.Pool(), Certificates: []tls.Certificate{b.client}, MinVersion: tls.VersionTLS12}
}

// choose returns plain without TLS (b nil) and secure with it: a URL
// scheme, the suffix naming a TLS variant, a note in a progress line.
func (b *benchTLS) choose(plain, secure string) string {
	if b == nil {
		return plain
	}
	return secure
}
