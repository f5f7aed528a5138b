package tokenclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/fencegate/fencegate/internal/tlsfiles"
	"github.com/fencegate/fencegate/tokenapi"
)

// ErrPlainURL is returned by NewClient for a server given as an http:// URL
// to a client configured for TLS (WithTLS, or WithHTTPClient with a CA or a
// certificate): it would send its requests, and take tokens, in clear from
// whoever answers there.
var ErrPlainURL = errors.New("tokenservice: the client is configured for TLS but a server is given as a plain http:// URL; give it as https://HOST:PORT or HOST:PORT")

// usesTLS reports whether the client is configured for TLS: WithTLS, or an
// HTTP client whose transport trusts a CA or presents a certificate.
func (c *Client) usesTLS() bool {
	if c.tlsConfig != nil {
		return true
	}
	if c.hc == nil {
		return false
	}
	t, ok := c.hc.Transport.(*http.Transport)
	return ok && t.TLSClientConfig != nil && (t.TLSClientConfig.RootCAs != nil || len(t.TLSClientConfig.Certificates) > 0)
}

// LoadClientTLS returns the TLS configuration of a client of the token
// service: the nodes' certificates must verify against the CA in caFile and
// carry the peer role. certFile and keyFile (both or neither) are the
// client's own certificate, which identifies it (role client or admin);
// without them it identifies with a bearer credential (WithCredential).
// Every file is checked now, as tokenservice.LoadNodeTLS does.
func LoadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, fmt.Errorf("%w: no CA file: the client needs the cluster CA to verify the nodes", tokenapi.ErrBadTLS)
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: give both a certificate and its key, or neither", tokenapi.ErrBadTLS)
	}
	pool, err := tlsfiles.LoadCA(caFile)
	if err != nil {
		return nil, err
	}
	var certs []tls.Certificate
	if certFile != "" {
		pair, err := tlsfiles.LoadPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		if err := tlsfiles.VerifyLeaf(pair.Leaf, pool, certFile, caFile); err != nil {
			return nil, err
		}
		if len(tokenapi.RolesOf(pair.Leaf)) == 0 {
			return nil, fmt.Errorf("%w: certificate %s names no role (its OU must be client, admin or peer); issue one with a role", tokenapi.ErrBadTLS, certFile)
		}
		certs = []tls.Certificate{pair}
	}
	return ClientTLSConfig(pool, certs...), nil
}

// ClientTLSConfig returns a client TLS configuration that trusts ca and
// accepts only servers that present the peer role; certs (optional) is the
// client's own certificate.
func ClientTLSConfig(ca *x509.CertPool, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{
		RootCAs:            ca,
		Certificates:       certs,
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"http/1.1"},
		ClientSessionCache: tls.NewLRUClientSessionCache(64),
		VerifyConnection:   RequirePeerRole,
	}
}

// RequirePeerRole is a tls.Config VerifyConnection that refuses a peer
// whose certificate lacks the peer role (a client's certificate signed by
// the same CA must not pass for a node). ClientTLSConfig installs it; so
// does a node's Raft layer.
func RequirePeerRole(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tokenservice: the other side presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if !slices.Contains(tokenapi.RolesOf(leaf), tokenapi.RolePeer) {
		return fmt.Errorf("tokenservice: certificate of %q has roles %v, not peer: it is not a node of this cluster", leaf.Subject.CommonName, tokenapi.RolesOf(leaf))
	}
	return nil
}
