package tokenclient

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"time"
)

// LoadClientTLS returns the TLS configuration of a client of the token
// service: the nodes' certificates must verify against the CA in caFile and
// carry the peer role. certFile and keyFile (both or neither) are the
// client's own certificate, which identifies it (role client or admin);
// without them it identifies with a bearer credential (WithCredential).
// Every file is checked now, as LoadNodeTLS does.
func LoadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, fmt.Errorf("%w: no CA file: the client needs the cluster CA to verify the nodes", ErrBadTLS)
	}
	if (certFile == "") != (keyFile == "") {
		return nil, fmt.Errorf("%w: give both a certificate and its key, or neither", ErrBadTLS)
	}
	pool, err := loadCA(caFile)
	if err != nil {
		return nil, err
	}
	var certs []tls.Certificate
	if certFile != "" {
		pair, err := loadPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		if err := verifyLeaf(pair.Leaf, pool, certFile, caFile); err != nil {
			return nil, err
		}
		if len(rolesOf(pair.Leaf)) == 0 {
			return nil, fmt.Errorf("%w: certificate %s names no role (its OU must be client, admin or peer); issue one with a role", ErrBadTLS, certFile)
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
		VerifyConnection:   requirePeerRole,
	}
}

// requirePeerRole is a VerifyConnection that refuses a peer whose
// certificate lacks the peer role (a client's certificate signed by the
// same CA must not pass for a node).
func requirePeerRole(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tokenservice: the other side presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if !slices.Contains(rolesOf(leaf), RolePeer) {
		return fmt.Errorf("tokenservice: certificate of %q has roles %v, not peer: it is not a node of this cluster", leaf.Subject.CommonName, rolesOf(leaf))
	}
	return nil
}

// rolesOf reads the roles of a certificate from its subject's OUs.
func rolesOf(c *x509.Certificate) []Role {
	var out []Role
	for _, ou := range c.Subject.OrganizationalUnit {
		if r := Role(ou); slices.Contains(Roles, r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// Credentials are the bearer credentials a node accepts, as read from its
func readFile(what, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%w: cannot read %s %s (%v); check the path and its permissions", ErrBadTLS, what, path, err)
	}
	return b, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	b, err := readFile("CA file", path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	n := 0
	now := time.Now()
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: CA file %s holds a certificate that does not parse: %v", ErrBadTLS, path, err)
		}
		if now.After(c.NotAfter) {
			return nil, fmt.Errorf("%w: CA certificate %q in %s expired on %s; make a new CA and reissue the certificates", ErrBadTLS, c.Subject.CommonName, path, c.NotAfter.UTC().Format(time.DateOnly))
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate; give the cluster CA's certificate (ca.pem)", ErrBadTLS, path)
	}
	return pool, nil
}

func loadPair(certFile, keyFile string) (tls.Certificate, error) {
	cb, err := readFile("certificate", certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	kb, err := readFile("key", keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	if blk, _ := pem.Decode(cb); blk == nil || blk.Type != "CERTIFICATE" {
		return tls.Certificate{}, fmt.Errorf("%w: %s holds no PEM certificate", ErrBadTLS, certFile)
	}
	if blk, _ := pem.Decode(kb); blk == nil || !strings.Contains(blk.Type, "PRIVATE KEY") {
		return tls.Certificate{}, fmt.Errorf("%w: %s holds no PEM private key", ErrBadTLS, keyFile)
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, fmt.Errorf("%w: key %s does not match certificate %s; give the key made together with that certificate", ErrBadTLS, keyFile, certFile)
		}
		return tls.Certificate{}, fmt.Errorf("%w: certificate %s with key %s: %v", ErrBadTLS, certFile, keyFile, err)
	}
	return pair, nil
}

// verifyLeaf checks that leaf is valid today and signed by the CA.
func verifyLeaf(leaf *x509.Certificate, ca *x509.CertPool, certFile, caFile string) error {
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("%w: certificate %s expired on %s; issue a new one signed by the cluster CA", ErrBadTLS, certFile, leaf.NotAfter.UTC().Format(time.DateOnly))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("%w: certificate %s is not valid before %s; check this host's clock", ErrBadTLS, certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: now})
	if err == nil {
		return nil
	}
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w: certificate %s (issued by %q) is not signed by the CA in %s; use a certificate of this cluster's CA, or the CA that signed it", ErrBadTLS, certFile, leaf.Issuer.CommonName, caFile)
	}
	return fmt.Errorf("%w: certificate %s does not verify against the CA in %s: %v", ErrBadTLS, certFile, caFile, err)
}

// hostOf returns the host of HOST:PORT or URL a.
func hostOf(a string) string {
	if _, rest, ok := strings.Cut(a, "://"); ok {
		a = rest
	}
	host, _, err := net.SplitHostPort(strings.TrimSuffix(a, "/"))
	if err != nil {
		return a
	}
	return host
}

// isLoopback reports whether host is a loopback name or address.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
