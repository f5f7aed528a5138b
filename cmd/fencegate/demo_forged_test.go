package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// 'demo --help' lists both demos, each with its flags.
func TestDemoHelpListsForgedToken(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("demo --help: exit %d\n%s", code, stderr.String())
	}
	out := stderr.String()
	for _, want := range []string{"fencegate demo forged-token", "Usage of fencegate demo forged-token:", "forged-token.svg"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo --help does not mention %q:\n%s", want, out)
		}
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"demo", "forged-token", "--help"}, &stdout, &stderr); code != 0 {
		t.Errorf("demo forged-token --help: exit %d\n%s", code, stderr.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"demo", "forged-token", "--ttl", "1ms"}, &stdout, &stderr); code == 0 ||
		strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 || !strings.Contains(stderr.String(), "--ttl") {
		t.Errorf("demo forged-token --ttl 1ms: exit %d, %q; want a one-line usage error naming --ttl", code, stderr.String())
	}
}

// The scene through the command: exit 0, the verdict printed, the picture
// written.
func TestDemoForgedToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr, _ := testutil.Redis(t)
	pic := filepath.Join(t.TempDir(), "forged.svg")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"demo", "forged-token", "--postgres", testutil.PostgresAdminDSN(), "--redis", addr, "--picture", pic}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("demo forged-token: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	if out := stdout.String(); !strings.Contains(out, "Verdict: every forged") || strings.Count(out, "refused, SQLSTATE") != 4 {
		t.Errorf("demo forged-token output lacks the verdict or the four refusals:\n%s", out)
	}
	if !strings.Contains(stdout.String(), pic) {
		t.Errorf("output does not name the picture %s", pic)
	}
}
