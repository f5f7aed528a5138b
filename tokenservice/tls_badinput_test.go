package tokenservice_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// Bad input: missing or unreadable certificate files, a certificate signed
// by another CA, an expired certificate, a key that does not match, a
// certificate of another node or role, a bad credentials line: one line at
// startup naming the file (and the line) and what to do, before anything
// listens or is written.
func TestCLIBadTLSInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, other := newCA(t, "cluster"), newCA(t, "other")
	write := func(name string, l *pki.Leaf) (string, string) {
		c, k, err := l.Write(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return c, k
	}
	issue := func(ca *pki.CA, name, role string, hosts []string, o pki.Options) *pki.Leaf {
		l, err := ca.Issue(name, []string{role}, hosts, o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	caFile, _, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	loop := []string{"127.0.0.1"}
	n1Cert, n1Key := write("n1", issue(ca, "n1", "peer", loop, pki.Options{}))
	n2Cert, n2Key := write("n2", issue(ca, "n2", "peer", loop, pki.Options{}))
	strangerCert, strangerKey := write("stranger", issue(other, "n1", "peer", loop, pki.Options{}))
	expiredCert, expiredKey := write("expired", issue(ca, "n1", "peer", loop, pki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))
	clientCert, clientKey := write("client", issue(ca, "n1", "client", loop, pki.Options{}))
	farCert, farKey := write("far", issue(ca, "n1", "peer", []string{"10.9.9.9"}, pki.Options{}))
	appExpiredCert, appExpiredKey := write("app-expired", issue(ca, "app", "client", nil, pki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}))
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("this is not a certificate\n"), 0o644)
	cred, _ := tokenclient.NewClientCredential("app")
	badCreds := filepath.Join(dir, "creds")
	os.WriteFile(badCreds, []byte("# node credentials\n"+cred.ServerLine(tokenapi.RoleClient)+"\napp2 superuser sha256:"+strings.Repeat("ab", 32)+"\n"), 0o644)
	clientCreds := filepath.Join(dir, "app.credential")
	os.WriteFile(clientCreds, []byte("\n"+cred.ServerLine(tokenapi.RoleClient)+"\n"), 0o600)
	missing := filepath.Join(dir, "missing.pem")

	raft, api := testutil.FreeAddr(t), testutil.FreeAddr(t)
	data := filepath.Join(dir, "data")
	serve := func(extra ...string) []string {
		return append([]string{"token", "serve", "--id", "n1", "--data-dir", data, "--raft-addr", raft, "--api-addr", api}, extra...)
	}
	tlsArgs := func(caF, cert, key string) []string {
		return []string{"--tls-ca", caF, "--tls-cert", cert, "--tls-key", key}
	}
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"missing CA", serve(tlsArgs(missing, n1Cert, n1Key)...), 1, []string{missing, "no such file"}},
		{"unreadable CA (a directory)", serve(tlsArgs(dir, n1Cert, n1Key)...), 1, []string{dir, "cannot read"}},
		{"CA not PEM", serve(tlsArgs(notPEM, n1Cert, n1Key)...), 1, []string{notPEM, "no PEM certificate"}},
		{"missing certificate", serve(tlsArgs(caFile, missing, n1Key)...), 1, []string{missing, "cannot read"}},
		{"missing key", serve(tlsArgs(caFile, n1Cert, missing)...), 1, []string{missing, "cannot read"}},
		{"key of another certificate", serve(tlsArgs(caFile, n1Cert, n2Key)...), 1, []string{n2Key, n1Cert, "does not match"}},
		{"certificate of another CA", serve(tlsArgs(caFile, strangerCert, strangerKey)...), 1, []string{strangerCert, caFile, "not signed by the CA"}},
		{"expired certificate", serve(tlsArgs(caFile, expiredCert, expiredKey)...), 1, []string{expiredCert, "expired", "issue a new one"}},
		{"certificate of another node", serve(tlsArgs(caFile, n2Cert, n2Key)...), 1, []string{n2Cert, `"n2"`, `"n1"`}},
		{"client certificate for a node", serve(tlsArgs(caFile, clientCert, clientKey)...), 1, []string{clientCert, "peer certificate"}},
		{"certificate not naming the address", serve(tlsArgs(caFile, farCert, farKey)...), 1, []string{farCert, "127.0.0.1", "10.9.9.9"}},
		{"CA without certificate and key", serve("--tls-ca", caFile), 2, []string{"--tls-ca, --tls-cert and --tls-key go together"}},
		{"credentials without TLS", serve("--credentials-file", badCreds), 2, []string{"--credentials-file needs TLS"}},
		{"bad credentials line", serve(append(tlsArgs(caFile, n1Cert, n1Key), "--credentials-file", badCreds)...), 1, []string{badCreds, "line 3", "unknown role"}},
		{"client: missing CA", []string{"token", "next", "r", "--servers", api, "--tls-ca", missing}, 1, []string{missing}},
		{"client: expired certificate", []string{"token", "status", "--servers", api, "--tls-ca", caFile, "--tls-cert", appExpiredCert, "--tls-key", appExpiredKey}, 1, []string{appExpiredCert, "expired"}},
		{"client: node's credentials line", []string{"token", "next", "r", "--servers", api, "--tls-ca", caFile, "--credentials-file", clientCreds}, 1, []string{clientCreds, "line 2", "NAME SECRET"}},
		{"client: credential in clear to another host", []string{"token", "next", "r", "--servers", "http://192.0.2.1:7101", "--credentials-file", writeCred(t, dir, cred)}, 2, []string{"refusing to send a bearer credential over plain HTTP", "192.0.2.1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if stderr := cliRefuses(t, tc.args, tc.code, tc.want...); strings.Contains(stderr, cred.Secret) {
				t.Errorf("stderr shows the secret: %s", stderr)
			}
		})
	}
	if m, _ := filepath.Glob(filepath.Join(data, "*")); len(m) != 0 {
		t.Errorf("refused starts left files behind: %v", m)
	}
}

func writeCred(t *testing.T, dir string, c tokenclient.ClientCredential) string {
	t.Helper()
	p := filepath.Join(dir, "good.credential")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if err := os.WriteFile(p, []byte(c.FileLine()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
