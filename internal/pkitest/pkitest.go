// Package pkitest issues the certificates of this module's TLS tests from a
// pki.CA: those of an in-process token service cluster
// (tokenservicetest.WithTLS) and those of its clients.
package pkitest

import (
	"crypto/tls"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// WithTLS runs every node of a tokenservicetest cluster with TLS: a peer
// certificate from ca for each (CN = its ID, SAN 127.0.0.1), with creds as
// the bearer credentials each node accepts (nil: certificates only). The
// cluster's membership helpers use an admin certificate of ca.
func WithTLS(ca *pki.CA, creds *tokenservice.Credentials) tokenservicetest.Option {
	node := func(id string) *tokenservice.NodeTLS {
		return &tokenservice.NodeTLS{CA: ca.Pool(), Cert: issue(ca, id, []string{"127.0.0.1"}, tokenapi.RolePeer)}
	}
	admin := tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool(), issue(ca, "tokenservicetest-admin", nil, tokenapi.RoleAdmin)))
	return tokenservicetest.WithTLS(node, creds, admin)
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
