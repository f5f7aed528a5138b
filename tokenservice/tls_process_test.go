package tokenservice_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

// Three "fencegate token serve" processes over TLS, with the certificates
// and the credential made by "fencegate token certs" and "fencegate token
// credential"; "token next" and "token status" carry a certificate or the
// credential, and are refused without one.
func TestCLITLSCluster(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	args := []string{"token", "certs", "--out", certs, "--client", "app", "--admin", "ops"}
	for i := range 3 {
		args = append(args, "--node", fmt.Sprintf("n%d=127.0.0.1", i+1))
	}
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("token certs: exit %d\n%s", code, stderr)
	}
	credFile := filepath.Join(dir, "app.credential")
	code, nodeLine, stderr := runCLI(t, "token", "credential", "--name", "app", "--role", "client", "--out", credFile)
	if code != 0 {
		t.Fatalf("token credential: exit %d\n%s", code, stderr)
	}
	if fi, err := os.Stat(credFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v, mode %v; want 0600", err, fi.Mode())
	}
	cred, err := tokenclient.LoadClientCredential(credFile)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(nodeLine+stderr, cred.Secret) || !strings.HasPrefix(nodeLine, "app client sha256:") {
		t.Fatalf("token credential printed %q: the secret, or not the node's line", nodeLine)
	}
	nodeCreds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(nodeCreds, []byte(nodeLine), 0o644); err != nil {
		t.Fatal(err)
	}

	var peers []string
	raft, api := make([]string, 3), make([]string, 3)
	for i := range 3 {
		raft[i], api[i] = testutil.FreeAddr(t), testutil.FreeAddr(t)
		peers = append(peers, fmt.Sprintf("n%d=%s=%s", i+1, raft[i], api[i]))
	}
	ca := filepath.Join(certs, "ca.pem")
	var procs []*proc
	for i := range 3 {
		id := "n" + strconv.Itoa(i+1)
		p := &proc{t: t, name: id, args: []string{
			"token", "serve", "--id", id, "--data-dir", filepath.Join(dir, id),
			"--raft-addr", raft[i], "--api-addr", api[i], "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--leader-lease-timeout", "150ms",
			"--tls-ca", ca, "--tls-cert", filepath.Join(certs, id+".pem"), "--tls-key", filepath.Join(certs, id+"-key.pem"),
			"--credentials-file", nodeCreds,
		}}
		procs = append(procs, p)
	}
	startAll(t, procs)
	servers := strings.Join(api, ",") // HOST:PORT: https with --tls-ca
	var last int64
	for _, who := range [][]string{
		{"--tls-ca", ca, "--tls-cert", filepath.Join(certs, "client-app.pem"), "--tls-key", filepath.Join(certs, "client-app-key.pem")},
		{"--tls-ca", ca, "--credentials-file", credFile},
	} {
		code, out, stderr := runCLI(t, append([]string{"token", "next", "orders/42", "--servers", servers, "--timeout", "20s"}, who...)...)
		if code != 0 {
			t.Fatalf("token next %v: exit %d\n%s", who, code, stderr)
		}
		tok, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if err != nil || tok <= last {
			t.Fatalf("token next printed %q; want a token above %d", out, last)
		}
		last = tok
	}
	code, _, stderr = runCLI(t, "token", "next", "orders/42", "--servers", servers, "--tls-ca", ca)
	if code != 1 || !strings.Contains(stderr, "needs role client") {
		t.Fatalf("token next without identity: exit %d\n%s; want a refusal naming role client", code, stderr)
	}
	code, out, stderr := runCLI(t, "token", "status", "--servers", servers, "--tls-ca", ca,
		"--tls-cert", filepath.Join(certs, "admin-ops.pem"), "--tls-key", filepath.Join(certs, "admin-ops-key.pem"))
	if code != 0 || strings.Count(out, "https://") < 3 || strings.Contains(out, "unreachable") {
		t.Fatalf("token status as admin: exit %d\n%s%s; want three reachable https members", code, out, stderr)
	}
	t.Logf("status:\n%s", out)

	// The admin commands take the same flags: an admin lists the members
	// and takes a snapshot and restores it; a client may do neither
	// change, and is told which role it needs, in one line.
	admin := []string{"--servers", servers, "--tls-ca", ca, "--tls-cert", filepath.Join(certs, "admin-ops.pem"), "--tls-key", filepath.Join(certs, "admin-ops-key.pem")}
	client := []string{"--servers", servers, "--tls-ca", ca, "--credentials-file", credFile}
	code, out, stderr = runCLI(t, append([]string{"token", "members", "list"}, admin...)...)
	if code != 0 || strings.Count(out, "Voter") != 3 || strings.Count(out, "yes") != 3 || strings.Count(out, "https://") != 3 {
		t.Fatalf("members list as admin: exit %d\n%s%s; want three caught-up https voters", code, out, stderr)
	}
	snap := filepath.Join(dir, "snapshot.json")
	for _, tc := range []struct {
		args []string
		who  []string
		code int
		want string
	}{
		{[]string{"token", "members", "remove", "n3"}, client, 1, "needs role admin"},
		{[]string{"token", "members", "add", "n4", "127.0.0.1:1", "127.0.0.1:2"}, client, 1, "needs role admin"},
		{[]string{"token", "snapshot", "--out", snap}, client, 1, "needs role admin"},
		{[]string{"token", "snapshot", "--out", snap}, admin, 0, "snapshot of cluster"},
		{[]string{"token", "restore", "--from", snap, "--margin", "1000"}, client, 1, "needs role admin"},
		{[]string{"token", "restore", "--from", snap, "--margin", "1000"}, admin, 0, "counter raised"},
	} {
		code, out, stderr := runCLI(t, append(tc.args, tc.who...)...)
		got := out
		if tc.code != 0 {
			got = stderr
			if n := strings.Count(strings.TrimRight(stderr, "\n"), "\n"); n != 0 {
				t.Errorf("%v: %d lines on stderr, want 1:\n%s", tc.args, n+1, stderr)
			}
		}
		if code != tc.code || !strings.Contains(got, tc.want) {
			t.Fatalf("%v as %s: exit %d (want %d)\n%s%s; want %q", tc.args, tc.who[len(tc.who)-2], code, tc.code, out, stderr, tc.want)
		}
	}
	code, out, stderr = runCLI(t, "token", "next", "orders/42", "--servers", servers, "--tls-ca", ca, "--credentials-file", credFile)
	if tok, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64); code != 0 || err != nil || tok <= last+1000 {
		t.Fatalf("token next after the restore: exit %d %q %s; want a token above %d", code, out, stderr, last+1000)
	}
}
