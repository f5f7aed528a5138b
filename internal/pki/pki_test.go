package pki_test

import (
	"crypto/x509"
	"errors"
	"os"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
)

// A CA written and loaded again issues certificates that verify against
// it, with the roles as OUs and the hosts as SANs; files are never
// overwritten and keys are private.
func TestCAWriteLoadIssue(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.NewCA("test CA", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if _, _, err := ca.Write(dir, "ca"); !errors.Is(err, pki.ErrExists) {
		t.Fatalf("second Write: %v; want ErrExists", err)
	}
	loaded, err := pki.LoadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := loaded.Issue("n1", []string{"peer"}, []string{"10.0.0.1", "n1.example.com"}, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "n1.example.com", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("issued certificate does not verify as a server for its name: %v", err)
	}
	if err := leaf.Cert.VerifyHostname("10.0.0.1"); err != nil {
		t.Fatal(err)
	}
	if got := leaf.Cert.Subject.OrganizationalUnit; len(got) != 1 || got[0] != "peer" || leaf.Cert.Subject.CommonName != "n1" {
		t.Fatalf("subject %v; want OU=peer CN=n1", leaf.Cert.Subject)
	}
	client, err := loaded.Issue("app", []string{"client"}, nil, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Fatal("a client certificate verifies as a server")
	}
	if _, err := pki.LoadCA(certFile, keyFile+".missing"); err == nil {
		t.Fatal("LoadCA without the key succeeded")
	}
}
