// Package tlsfiles reads the token service's TLS material (the cluster CA,
// a certificate and its key) for both its nodes (tokenservice) and its
// clients (tokenclient), and says in each error which file is wrong and
// what to do. IsLoopback tells both where TLS may be left out.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

func readFile(what, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%w: cannot read %s %s (%v); check the path and its permissions", tokenapi.ErrBadTLS, what, path, err)
	}
	return b, nil
}

// LoadCA reads the cluster CA's certificates from path; an expired one,
// none, or one that does not parse is refused.
func LoadCA(path string) (*x509.CertPool, error) {
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
			return nil, fmt.Errorf("%w: CA file %s holds a certificate that does not parse: %v", tokenapi.ErrBadTLS, path, err)
		}
		if now.After(c.NotAfter) {
			return nil, fmt.Errorf("%w: CA certificate %q in %s expired on %s; make a new CA and reissue the certificates", tokenapi.ErrBadTLS, c.Subject.CommonName, path, c.NotAfter.UTC().Format(time.DateOnly))
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate; give the cluster CA's certificate (ca.pem)", tokenapi.ErrBadTLS, path)
	}
	return pool, nil
}

// LoadPair reads a certificate and its key, each PEM.
func LoadPair(certFile, keyFile string) (tls.Certificate, error) {
	cb, err := readFile("certificate", certFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	kb, err := readFile("key", keyFile)
	if err != nil {
		return tls.Certificate{}, err
	}
	if blk, _ := pem.Decode(cb); blk == nil || blk.Type != "CERTIFICATE" {
		return tls.Certificate{}, fmt.Errorf("%w: %s holds no PEM certificate", tokenapi.ErrBadTLS, certFile)
	}
	if blk, _ := pem.Decode(kb); blk == nil || !strings.Contains(blk.Type, "PRIVATE KEY") {
		return tls.Certificate{}, fmt.Errorf("%w: %s holds no PEM private key", tokenapi.ErrBadTLS, keyFile)
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		if strings.Contains(err.Error(), "does not match") {
			return tls.Certificate{}, fmt.Errorf("%w: key %s does not match certificate %s; give the key made together with that certificate", tokenapi.ErrBadTLS, keyFile, certFile)
		}
		return tls.Certificate{}, fmt.Errorf("%w: certificate %s with key %s: %v", tokenapi.ErrBadTLS, certFile, keyFile, err)
	}
	return pair, nil
}

// VerifyLeaf checks that leaf is valid today and signed by the CA.
func VerifyLeaf(leaf *x509.Certificate, ca *x509.CertPool, certFile, caFile string) error {
	now := time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("%w: certificate %s expired on %s; issue a new one signed by the cluster CA", tokenapi.ErrBadTLS, certFile, leaf.NotAfter.UTC().Format(time.DateOnly))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("%w: certificate %s is not valid before %s; check this host's clock", tokenapi.ErrBadTLS, certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: ca, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, CurrentTime: now})
	if err == nil {
		return nil
	}
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w: certificate %s (issued by %q) is not signed by the CA in %s; use a certificate of this cluster's CA, or the CA that signed it", tokenapi.ErrBadTLS, certFile, leaf.Issuer.CommonName, caFile)
	}
	return fmt.Errorf("%w: certificate %s does not verify against the CA in %s: %v", tokenapi.ErrBadTLS, certFile, caFile, err)
}

// IsLoopback reports whether a (HOST:PORT or URL) names a loopback host:
// traffic to it stays on this machine, so it needs no TLS.
func IsLoopback(a string) bool {
	if _, rest, ok := strings.Cut(a, "://"); ok {
		a = rest
	}
	host, _, err := net.SplitHostPort(strings.TrimSuffix(a, "/"))
	if err != nil {
		host = a
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
