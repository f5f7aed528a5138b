package tokentest

import (
	"crypto/tls"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenservice"
)

type tlsOptions struct {
	ca    *pki.CA
	creds *tokenservice.Credentials
	admin *tls.Config
}

// WithTLS runs every node with TLS: a peer certificate from ca for each
// (CN = its ID, SAN 127.0.0.1), mutual TLS on Raft and between nodes, and
// authentication on the API, with creds as the bearer credentials each
// node accepts (nil: certificates only). Clients need TLS options of their
// own (ClientTLS); the membership helpers (AddNode, AddMember, Remove,
// Replace, WaitVoter) use an admin certificate of ca. The default is plain
// HTTP and TCP.
func WithTLS(ca *pki.CA, creds *tokenservice.Credentials) Option {
	return func(o *options) {
		o.tls = &tlsOptions{ca: ca, creds: creds}
		o.configure = append(o.configure, func(i int, cfg *tokenservice.Config) {
			o.tls.configure(cfg)
		})
	}
}

func (t *tlsOptions) configure(cfg *tokenservice.Config) {
	leaf, err := t.ca.Issue(cfg.ID, []string{string(tokenservice.RolePeer)}, []string{"127.0.0.1"}, pki.Options{})
	if err != nil {
		panic(err) // key generation does not fail
	}
	cfg.TLS = &tokenservice.NodeTLS{CA: t.ca.Pool(), Cert: leaf.TLSCertificate()}
	cfg.Credentials = t.creds
}

// ClientTLS returns client options that trust ca and present a certificate
// named name with the given roles (none: no certificate).
func ClientTLS(t testing.TB, ca *pki.CA, name string, roles ...tokenservice.Role) []tokenservice.ClientOption {
	t.Helper()
	var certs []tls.Certificate
	if len(roles) > 0 {
		rs := make([]string, len(roles))
		for i, r := range roles {
			rs[i] = string(r)
		}
		leaf, err := ca.Issue(name, rs, nil, pki.Options{})
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, leaf.TLSCertificate())
	}
	return []tokenservice.ClientOption{tokenservice.WithTLS(tokenservice.ClientTLSConfig(ca.Pool(), certs...))}
}

func (c *Cluster) scheme() string {
	if c.opts.tls != nil {
		return "https://"
	}
	return "http://"
}

// adminOptions are the client options of membership changes.
func (c *Cluster) adminOptions() []tokenservice.ClientOption {
	if c.opts.tls == nil {
		return nil
	}
	return ClientTLS(c.t, c.opts.tls.ca, "tokentest-admin", tokenservice.RoleAdmin)
}
