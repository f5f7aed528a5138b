package tokenservicetest

import (
	"crypto/tls"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// WithTLS runs every node with TLS: node(id) returns the TLS material of
// the node named id ("n1", "n2", ...), a CA and a certificate that names
// the node (CN = id, OU = peer) and 127.0.0.1. Raft and the links between
// nodes then use mutual TLS, and the API is served over HTTPS and
// authenticates its callers, accepting creds as bearer credentials (nil:
// certificates only). The membership helpers (AddNode, AddMember, Remove,
// Replace, WaitVoter) use the client options admin, which carry an admin
// certificate of the CA; clients need TLS options of their own
// (tokenclient.WithTLS). The default is plain HTTP and TCP.
func WithTLS(node func(id string) *tokenservice.NodeTLS, creds *tokenservice.Credentials, admin ...tokenclient.ClientOption) Option {
	return func(o *options) {
		o.tls, o.admin = true, admin
		o.configure = append(o.configure, func(_ int, cfg *tokenservice.Config) {
			cfg.TLS = node(cfg.ID)
			cfg.Credentials = creds
		})
	}
}

func (c *Cluster) scheme() string {
	if c.opts.tls {
		return "https://"
	}
	return "http://"
}

// WithCA runs every node of the cluster with TLS: a peer
// certificate from ca for each (CN = its ID, SAN 127.0.0.1), with creds as
// the bearer credentials each node accepts (nil: certificates only). The
// cluster's membership helpers use an admin certificate of ca.
func WithCA(ca *pki.CA, creds *tokenservice.Credentials) Option {
	node := func(id string) *tokenservice.NodeTLS {
		return &tokenservice.NodeTLS{CA: ca.Pool(), Cert: issue(ca, id, []string{"127.0.0.1"}, tokenapi.RolePeer)}
	}
	admin := tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool(), issue(ca, "tokenservicetest-admin", nil, tokenapi.RoleAdmin)))
	return WithTLS(node, creds, admin)
}

// ClientTLS returns client options that trust ca and present a certificate
// named name with the given roles (none: no certificate).
func ClientTLS(t testing.TB, ca *pki.CA, name string, roles ...tokenapi.Role) []tokenclient.ClientOption {
	t.Helper()
	var certs []tls.Certificate
	if len(roles) > 0 {
		certs = append(certs, issue(ca, name, nil, roles...))
	}
	return []tokenclient.ClientOption{tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool(), certs...))}
}

// issue returns a certificate of ca named name with roles for hosts.
func issue(ca *pki.CA, name string, hosts []string, roles ...tokenapi.Role) tls.Certificate {
	rs := make([]string, len(roles))
	for i, r := range roles {
		rs[i] = string(r)
	}
	leaf, err := ca.Issue(name, rs, hosts, pki.Options{})
	if err != nil {
		panic(err) // key generation does not fail
	}
	return leaf.TLSCertificate()
}
