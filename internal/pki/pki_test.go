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

// A certificate names its cluster in one URI subject alternative name,
// fencegate://cluster/NAME, which ClusterOf reads back; one issued without
// a cluster names none; a name that cannot be a URI path is refused.
func TestClusterName(t *testing.T) {
	ca, err := pki.NewCA("test CA", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue("n1", []string{"peer"}, []string{"10.0.0.1"}, pki.Options{Cluster: "prod-eu.1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := leaf.Cert.URIs; len(got) != 1 || got[0].String() != "fencegate://cluster/prod-eu.1" {
		t.Fatalf("URIs %v; want fencegate://cluster/prod-eu.1", got)
	}
	if got, err := pki.ClusterOf(leaf.Cert); got != "prod-eu.1" || err != nil {
		t.Fatalf("ClusterOf = %q, %v; want prod-eu.1", got, err)
	}
	if err := leaf.Cert.VerifyHostname("10.0.0.1"); err != nil {
		t.Fatalf("the cluster URI hides the host: %v", err)
	}
	plain, err := ca.Issue("app", []string{"client"}, nil, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pki.ClusterOf(plain.Cert); got != "" || err != nil {
		t.Fatalf("ClusterOf of a certificate without a cluster = %q, %v; want none", got, err)
	}
	for _, bad := range []string{"a/b", "prod?x=1", "-x", "prod cluster"} {
		if _, err := ca.Issue("n1", []string{"peer"}, nil, pki.Options{Cluster: bad}); err == nil {
			t.Errorf("cluster name %q accepted", bad)
		}
	}
	two := *leaf.Cert
	u2, _ := pki.ClusterURI("staging")
	two.URIs = append(append(two.URIs[:0:0], two.URIs...), u2)
	if _, err := pki.ClusterOf(&two); err == nil {
		t.Error("a certificate naming two clusters was read as one")
	}
}
