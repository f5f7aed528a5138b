// Package pki makes the certificates of a token service cluster: a CA, one
// certificate per node and certificates for clients and administrators. It
// is what "fencegate token certs", the benchmarks and the tests use; the
// role convention it writes (OU = role, CN = name, the node ID for peers) is
// the one tokenservice reads.
//
// Keys are ECDSA P-256: small, and the cheapest handshakes Go offers with
// certificates every TLS client accepts.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// CA is a certificate authority that can issue certificates.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Options adjust a certificate. Zero values take the defaults stated on each field.
type Options struct {
	// NotBefore and NotAfter bound the validity. The defaults are one hour
	// ago (clocks differ a little between hosts) and NotBefore + Validity.
	NotBefore, NotAfter time.Time
	// Validity is used when NotAfter is zero. The default is 825 days
	// (the longest most TLS clients accept for a leaf).
	Validity time.Duration
	// Organization is the subject's O. The default is "fencegate".
	Organization string
	// Cluster names the cluster a leaf belongs to, written as the URI
	// subject alternative name fencegate://cluster/NAME (ClusterURI). The
	// default is none: a certificate of no particular cluster, as earlier
	// versions issued them.
	Cluster string
}

func (o Options) window(defaultValidity time.Duration) (time.Time, time.Time) {
	nb := o.NotBefore
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour).Truncate(time.Second)
	}
	na := o.NotAfter
	if na.IsZero() {
		v := o.Validity
		if v <= 0 {
			v = defaultValidity
		}
		na = nb.Add(v)
	}
	return nb, na
}

func (o Options) org() []string {
	if o.Organization == "" {
		return []string{"fencegate"}
	}
	return []string{o.Organization}
}

// NewCA makes a self-signed CA named cn. Its default validity is ten years.
func NewCA(cn string, o Options) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	nb, na := o.window(10 * 365 * 24 * time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn, Organization: o.org()},
		NotBefore:             nb,
		NotAfter:              na,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// Leaf is an issued certificate and its key.
type Leaf struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issue signs a certificate for name with the roles as its OUs. hosts (IP
// addresses or DNS names) become its subject alternative names; a
// certificate with hosts may serve TLS (server and client auth), one
// without only authenticates a client.
func (ca *CA) Issue(name string, roles []string, hosts []string, o Options) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate key for %s: %w", name, err)
	}
	nb, na := o.window(825 * 24 * time.Hour)
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, OrganizationalUnit: roles, Organization: o.org()},
		NotBefore:    nb,
		NotAfter:     na,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(hosts) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if o.Cluster != "" {
		u, err := ClusterURI(o.Cluster)
		if err != nil {
			return nil, err
		}
		tmpl.URIs = []*url.URL{u}
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign certificate for %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Leaf{Cert: cert, Key: key}, nil
}

// clusterName is what a cluster name may be: it is part of a URI.
var clusterName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ClusterURI returns the URI subject alternative name that binds a
// certificate to cluster name: fencegate://cluster/NAME. A node accepts
// peers only of its own certificate's cluster, so a certificate of a
// staging cluster signed by a shared CA is not a peer of production.
func ClusterURI(name string) (*url.URL, error) {
	if !clusterName.MatchString(name) {
		return nil, fmt.Errorf("pki: cluster name %q: use letters, digits, '.', '_' or '-' (at most 64, starting with a letter or digit)", name)
	}
	return &url.URL{Scheme: "fencegate", Host: "cluster", Path: "/" + name}, nil
}

// ClusterOf returns the cluster a certificate names (see ClusterURI), ""
// when it names none. A certificate that names several clusters, or one in
// a malformed fencegate URI, is an error: no reading of it is safe.
func ClusterOf(c *x509.Certificate) (string, error) {
	var names []string
	for _, u := range c.URIs {
		if u.Scheme != "fencegate" {
			continue
		}
		name, ok := strings.CutPrefix(u.Path, "/")
		if u.Host != "cluster" || !ok || !clusterName.MatchString(name) || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
			return "", fmt.Errorf("pki: certificate of %q has the malformed cluster name %q; want fencegate://cluster/NAME", c.Subject.CommonName, u.String())
		}
		names = append(names, name)
	}
	switch len(names) {
	case 0:
		return "", nil
	case 1:
		return names[0], nil
	}
	return "", fmt.Errorf("pki: certificate of %q names several clusters (%s); it must name one", c.Subject.CommonName, strings.Join(names, ", "))
}

// TLSCertificate returns the leaf as a tls.Certificate.
func (l *Leaf) TLSCertificate() tls.Certificate {
	return tls.Certificate{Certificate: [][]byte{l.Cert.Raw}, PrivateKey: l.Key, Leaf: l.Cert}
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// CertPEM encodes a certificate as PEM.
func CertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// KeyPEM encodes a private key as PKCS#8 PEM.
func KeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Write writes the CA as dir/NAME.pem and dir/NAME-key.pem.
func (ca *CA) Write(dir, name string) (certFile, keyFile string, err error) {
	return writePair(dir, name, ca.Cert, ca.Key)
}

// Write writes the leaf as dir/NAME.pem and dir/NAME-key.pem.
func (l *Leaf) Write(dir, name string) (certFile, keyFile string, err error) {
	return writePair(dir, name, l.Cert, l.Key)
}

// writePair writes a certificate (0644) and its key (0600), refusing to
// overwrite either file.
func writePair(dir, name string, c *x509.Certificate, k *ecdsa.PrivateKey) (string, string, error) {
	certFile, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	kp, err := KeyPEM(k)
	if err != nil {
		return "", "", err
	}
	if err := WriteNew(keyFile, kp, 0o600); err != nil {
		return "", "", err
	}
	if err := WriteNew(certFile, CertPEM(c), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// ErrExists is returned by WriteNew for a file that is already there.
var ErrExists = errors.New("pki: file exists")

// WriteNew creates path with data and mode; it never overwrites a file.
func WriteNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: %s", ErrExists, path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// LoadCA reads a CA certificate and its key written by Write.
func LoadCA(certFile, keyFile string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: load CA %s and %s: %w", certFile, keyFile, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA %s: %w", certFile, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("pki: CA key %s is not an ECDSA key", keyFile)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: %s is not a CA certificate", certFile)
	}
	return &CA{Cert: cert, Key: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return n.Add(n, big.NewInt(1))
}
