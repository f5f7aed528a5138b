package clientsuite

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
)

// certs is a throwaway certificate authority with a server certificate for
// 127.0.0.1 and a client certificate, written as PEM files.
type certs struct {
	CA                    string // CA certificate file
	ServerCert, ServerKey string
	ClientCert, ClientKey string
	pool                  *x509.CertPool
	server                tls.Certificate
}

// newCerts makes the CA "fencegate NAME test CA", the server certificate
// (127.0.0.1, localhost) and the client certificate "NAME-test-client".
func newCerts(t *testing.T, name string) *certs {
	t.Helper()
	dir := t.TempDir()
	ca, err := pki.NewCA("fencegate "+name+" test CA", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &certs{CA: filepath.Join(dir, "ca.pem"), pool: ca.Pool()}
	if err := pki.WriteNew(c.CA, pki.CertPEM(ca.Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue("127.0.0.1", nil, []string{"127.0.0.1", "localhost"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(name+"-test-client", nil, nil, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.ServerCert, c.ServerKey, err = server.Write(dir, "server"); err != nil {
		t.Fatal(err)
	}
	if c.ClientCert, c.ClientKey, err = client.Write(dir, "client"); err != nil {
		t.Fatal(err)
	}
	c.server = server.TLSCertificate()
	return c
}
