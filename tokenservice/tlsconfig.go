package tokenservice

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/tlsfiles"
	"github.com/fencegate/fencegate/tokenclient"
)

// NodeTLS is a node's TLS material: the cluster CA, which signs every node,
// client and admin certificate, and the node's own certificate, which it
// presents as a server (API and Raft) and as a client (Raft, forwarding).
// Build it with LoadNodeTLS; Start checks it against the node's ID and
// addresses.
type NodeTLS struct {
	// CA verifies the certificates of peers and clients.
	CA *x509.CertPool
	// Cert is this node's certificate (OU=peer, CN=its ID) and key.
	Cert tls.Certificate
	// CertFile names the certificate in error messages ("" for one made in memory).
	CertFile string
}

// LoadNodeTLS reads a node's CA, certificate and key files and checks them
// now, not at the first connection: each file readable and PEM, the key
// matching the certificate, the certificate and the CA valid today, and the
// certificate signed by the CA. The error names the file and what is wrong.
func LoadNodeTLS(caFile, certFile, keyFile string) (*NodeTLS, error) {
	if caFile == "" || certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: a node needs all three of the CA, its certificate and its key", ErrBadTLS)
	}
	pool, err := tlsfiles.LoadCA(caFile)
	if err != nil {
		return nil, err
	}
	pair, err := tlsfiles.LoadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if err := tlsfiles.VerifyLeaf(pair.Leaf, pool, certFile, caFile); err != nil {
		return nil, err
	}
	return &NodeTLS{CA: pool, Cert: pair, CertFile: certFile}, nil
}

// checkNode verifies that the node's certificate is a peer certificate for
// node id whose subject alternative names cover the hosts it advertises.
func (n *NodeTLS) checkNode(id string, addrs ...string) error {
	name := n.CertFile
	if name == "" {
		name = "(in memory)"
	}
	leaf := n.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(n.Cert.Certificate[0]); err != nil {
			return fmt.Errorf("%w: certificate %s: %v", ErrBadTLS, name, err)
		}
		n.Cert.Leaf = leaf
	}
	if !slices.Contains(tokenclient.RolesOf(leaf), RolePeer) {
		return fmt.Errorf("%w: certificate %s has roles %v; a node needs a peer certificate (OU=peer, CN=%s)", ErrBadTLS, name, tokenclient.RolesOf(leaf), id)
	}
	if leaf.Subject.CommonName != id {
		return fmt.Errorf("%w: certificate %s is for node %q (CN) but this node's ID is %q; give node %s its own certificate", ErrBadTLS, name, leaf.Subject.CommonName, id, id)
	}
	if len(leaf.ExtKeyUsage) > 0 && (!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth)) {
		return fmt.Errorf("%w: certificate %s is not valid for both serverAuth and clientAuth; a node's certificate needs both (it serves and dials)", ErrBadTLS, name)
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(a, "https://"), "http://"))
		if err != nil || host == "" {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		if err := leaf.VerifyHostname(host); err != nil {
			return fmt.Errorf("%w: certificate %s does not name %s (it names %s); peers reach this node there, so issue it with that address", ErrBadTLS, name, host, strings.Join(sansOf(leaf), ", "))
		}
	}
	if left := time.Until(leaf.NotAfter); left < 30*24*time.Hour {
		// Not an error yet: the caller logs it.
		return &expiringError{file: name, at: leaf.NotAfter}
	}
	return nil
}

// expiringError reports a certificate that expires within 30 days.
type expiringError struct {
	file string
	at   time.Time
}

func (e *expiringError) Error() string {
	return fmt.Sprintf("certificate %s expires on %s; issue a new one before then", e.file, e.at.UTC().Format(time.DateOnly))
}

func sansOf(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	if len(out) == 0 {
		out = []string{"no host"}
	}
	return out
}

// serverTLS is the API's TLS configuration: client certificates are
// verified when presented (bearer credentials need none).
func (n *NodeTLS) serverTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{n.Cert},
		ClientCAs:    n.CA,
		ClientAuth:   tls.VerifyClientCertIfGiven,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}
}

// raftTLS is the Raft layer's configuration: mutual, peers only.
func (n *NodeTLS) raftTLS() *tls.Config {
	return &tls.Config{
		Certificates:     []tls.Certificate{n.Cert},
		RootCAs:          n.CA,
		ClientCAs:        n.CA,
		ClientAuth:       tls.RequireAndVerifyClientCert,
		MinVersion:       tls.VersionTLS13,
		VerifyConnection: tokenclient.RequirePeerRole,
	}
}

// forwardTLS is the configuration of calls to other nodes' APIs: this node
// presents its certificate and accepts only peers; which peer is checked
// per request (forward.go).
func (n *NodeTLS) forwardTLS() *tls.Config {
	return ClientTLSConfig(n.CA, n.Cert)
}

// apiHostPort returns the API's HOST:PORT and scheme: https with TLS, http
// without. An address given with the other scheme is refused.
func apiHostPort(cfg Config) (hostPort, scheme string, err error) {
	scheme = "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	hostPort = strings.TrimSuffix(strings.TrimSpace(cfg.APIAddr), "/")
	if given, rest, ok := strings.Cut(hostPort, "://"); ok {
		if given != scheme {
			if cfg.TLS != nil {
				return "", "", fmt.Errorf("%w: api address %s says %s but the API serves https (TLS is configured); give it as HOST:PORT", ErrBadConfig, cfg.APIAddr, given)
			}
			return "", "", fmt.Errorf("%w: api address %s says %s but the API serves plain HTTP (no TLS configured); give it as HOST:PORT", ErrBadConfig, cfg.APIAddr, given)
		}
		hostPort = rest
	}
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return "", "", fmt.Errorf("%w: api address %q is not HOST:PORT", ErrBadConfig, cfg.APIAddr)
	}
	return hostPort, scheme, nil
}

// checkSecurity checks the TLS and credential settings of a node before
// anything listens, and warns when a node without TLS is reachable from
// other hosts. With TLS, the peers' API addresses become https.
func checkSecurity(cfg *Config) error {
	if cfg.TLS == nil {
		if cfg.Credentials != nil {
			return fmt.Errorf("%w: bearer credentials need TLS (a CA, a certificate and a key): secrets must not cross the network in clear, and nodes identify each other by certificate", ErrBadConfig)
		}
		for _, a := range []string{cfg.APIAddr, cfg.RaftAddr} {
			if !tlsfiles.IsLoopback(a) {
				cfg.Logger.Warn("NO TLS on an address other hosts can reach: anyone who reaches " + a +
					" can mint tokens, change membership and speak Raft to this node; configure TLS (a CA, a certificate and a key) or bind to 127.0.0.1")
			}
		}
		return nil
	}
	if err := cfg.TLS.checkNode(cfg.ID, cfg.APIAddr, cfg.RaftAddr); err != nil {
		var exp *expiringError
		if !errors.As(err, &exp) {
			return err
		}
		cfg.Logger.Warn(exp.Error())
	}
	peers := slices.Clone(cfg.Peers)
	for i, p := range peers {
		if rest, ok := strings.CutPrefix(p.APIAddr, "http://"); ok {
			peers[i].APIAddr = "https://" + rest
		}
	}
	cfg.Peers = peers
	return nil
}
