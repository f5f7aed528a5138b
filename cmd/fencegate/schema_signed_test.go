package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestSignedTokensCommands drives signed tokens through the command line:
// a signing token service, "token next --proof/--json", "schema
// require-signed" taking the cluster id from the service, a fence with the
// printed proof accepted and without it refused, and bad input as one line.
func TestSignedTokensCommands(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "keys")
	if err := os.WriteFile(keyFile, []byte("# signing keys\nk2 "+strings.Repeat("3c", 32)+"\nk1 "+strings.Repeat("c3", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := tokensign.LoadKeys(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.SigningKeys = keys }))
	servers := strings.Join(c.APIURLs(), ",")
	var cid string
	testutil.WaitFor(t, 30*time.Second, "the cluster id", func() error {
		st, err := c.Client(t).Status(context.Background())
		if err != nil || st.ClusterID == "" {
			return errors.New("not recorded yet")
		}
		cid = st.ClusterID
		return nil
	})
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("k1 abcd\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "dup")
	if err := os.WriteFile(dup, []byte("k1 "+strings.Repeat("3c", 32)+"\nk1 "+strings.Repeat("3d", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	db := pgfencetest.New(t)

	cmd := func(t *testing.T, code int, args ...string) (string, string) {
		t.Helper()
		t.Setenv("DATABASE_URL", "")
		var stdout, stderr bytes.Buffer
		if got := run(context.Background(), args, &stdout, &stderr); got != code {
			t.Fatalf("%v: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", args, got, code, stdout.String(), stderr.String())
		}
		if code != 0 {
			lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "fencegate ") || strings.Contains(stderr.String(), strings.Repeat("3c", 32)) {
				t.Fatalf("%v: the error is not one clear line without secrets: %q", args, stderr.String())
			}
		}
		return stdout.String(), stderr.String()
	}

	// token next: the token alone, TOKEN PROOF, JSON.
	out, _ := cmd(t, 0, "token", "next", "orders/1", "--servers", servers)
	if _, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil {
		t.Fatalf("token next prints %q, want a number", out)
	}
	out, _ = cmd(t, 0, "token", "next", "orders/1", "--servers", servers, "--proof")
	f := strings.Fields(out)
	if len(f) != 2 || !strings.HasPrefix(f[1], "k2.") {
		t.Fatalf("token next --proof prints %q", out)
	}
	tok, _ := strconv.ParseInt(f[0], 10, 64)
	if err := keys.Verify(cid, "orders/1", tok, f[1]); err != nil {
		t.Fatalf("printed proof: %v", err)
	}
	out, _ = cmd(t, 0, "token", "next", "orders/1", "--servers", servers, "--json")
	var j struct {
		Resource string `json:"resource"`
		Token    int64  `json:"token"`
		Proof    string `json:"proof"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil || j.Resource != "orders/1" || j.Token <= tok || keys.Verify(cid, "orders/1", j.Token, j.Proof) != nil {
		t.Fatalf("token next --json prints %q (%v)", out, err)
	}

	// Bad input.
	_, errOut := cmd(t, 2, "schema", "require-signed", "--db", db.DSN)
	if !strings.Contains(errOut, "--signing-keys FILE is required") {
		t.Fatalf("no keys: %s", errOut)
	}
	_, errOut = cmd(t, 1, "schema", "require-signed", "--db", db.DSN, "--signing-keys", filepath.Join(dir, "missing"), "--cluster-id", cid)
	if !strings.Contains(errOut, "does not exist") {
		t.Fatalf("missing key file: %s", errOut)
	}
	_, errOut = cmd(t, 1, "schema", "require-signed", "--db", db.DSN, "--signing-keys", short, "--cluster-id", cid)
	if !strings.Contains(errOut, "is 2 bytes; use at least 32") {
		t.Fatalf("short key: %s", errOut)
	}
	_, errOut = cmd(t, 1, "schema", "require-signed", "--db", db.DSN, "--signing-keys", dup, "--cluster-id", cid)
	if !strings.Contains(errOut, "listed twice") {
		t.Fatalf("duplicate key id: %s", errOut)
	}
	_, errOut = cmd(t, 1, "schema", "require-signed", "--db", db.DSN, "--signing-keys", keyFile, "--cluster-id", "typo", "--servers", servers)
	if !strings.Contains(errOut, "--cluster-id typo is not the cluster id "+cid) {
		t.Fatalf("cluster id mismatch: %s", errOut)
	}
	_, errOut = cmd(t, 1, "schema", "require-signed", "--db", db.AppDSN, "--signing-keys", keyFile, "--cluster-id", cid)
	if !strings.Contains(errOut, "insufficient privilege") {
		t.Fatalf("as the application: %s", errOut)
	}
	_, errOut = cmd(t, 1, "token", "serve", "--id", "n9", "--data-dir", filepath.Join(dir, "n9"), "--signing-keys", short)
	if !strings.Contains(errOut, "--signing-keys") || !strings.Contains(errOut, "use at least 32") {
		t.Fatalf("token serve with a short key: %s", errOut)
	}

	// Require signed tokens, the cluster id from the token service.
	out, _ = cmd(t, 0, "schema", "require-signed", "--db", db.DSN, "--signing-keys", keyFile, "--servers", servers)
	if !strings.Contains(out, "requires signed tokens of cluster "+cid+": keys k2, k1 (k2 signs)") {
		t.Fatalf("require-signed prints %q", out)
	}
	out, _ = cmd(t, 0, "schema", "status", "--db", db.DSN)
	if !strings.Contains(out, "signed tokens:     required, cluster "+cid+", keys k2, k1") {
		t.Fatalf("status prints %q", out)
	}
	app := db.AppConn(t)
	ctx := context.Background()
	out, _ = cmd(t, 0, "token", "next", "orders/2", "--servers", servers, "--proof")
	f = strings.Fields(out)
	tok, _ = strconv.ParseInt(f[0], 10, 64)
	if _, err := app.Exec(ctx, fencegate.FenceSignedSQL, "orders/2", tok, f[1]); err != nil {
		t.Fatalf("fence with the printed proof: %v", err)
	}
	_, err = app.Exec(ctx, fencegate.FenceSignedSQL, "orders/3", tok, f[1])
	if pg := (*pgconn.PgError)(nil); !errors.As(err, &pg) || pg.Code != fencegate.CodeBadProof {
		t.Fatalf("the proof on another resource: %v", err)
	}
	_, err = app.Exec(ctx, fencegate.FenceSQL, "orders/2", tok)
	if pg := (*pgconn.PgError)(nil); !errors.As(err, &pg) || pg.Code != fencegate.CodeMisuse {
		t.Fatalf("two-argument fence: %v", err)
	}
	out, _ = cmd(t, 0, "schema", "require-signed", "--db", db.DSN, "--off")
	if !strings.Contains(out, "no longer requires signed tokens") {
		t.Fatalf("--off prints %q", out)
	}
	if _, err := app.Exec(ctx, fencegate.FenceSQL, "orders/2", tok); err != nil {
		t.Fatalf("two-argument fence after --off: %v", err)
	}
}
