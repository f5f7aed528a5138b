package tokenservice_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// token init --initial-token N: every token after it is above N, a lower
// floor leaves the counter alone, and a missing or negative floor is a
// usage error.
func TestCLIInitialToken(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	servers := strings.Join(c.APIURLs(), ",")
	cl := c.Client(t)
	tokenservicetest.Mint(t, cl, 3)

	code, out, stderr := runCLI(t, "token", "init", "--initial-token", "10000000", "--servers", servers)
	if code != 0 || !strings.Contains(out, "counter raised from") || !strings.Contains(out, "to 10000000") {
		t.Fatalf("init: exit %d:\n%s%s", code, out, stderr)
	}
	if tok := tokenservicetest.Mint(t, cl, 1)[0]; tok <= 10000000 {
		t.Fatalf("first token after init --initial-token 10000000: %d", tok)
	}
	code, out, stderr = runCLI(t, "token", "init", "--initial-token", "10", "--servers", servers)
	if code != 0 || !strings.Contains(out, "never goes down") {
		t.Fatalf("init below the counter: exit %d:\n%s%s", code, out, stderr)
	}
	if tok := tokenservicetest.Mint(t, cl, 1)[0]; tok <= 10000000 {
		t.Fatalf("token after a lower init: %d", tok)
	}
	for _, args := range [][]string{
		{"token", "init", "--servers", servers},
		{"token", "init", "--initial-token", "-3", "--servers", servers},
		{"token", "init", "--initial-token", "x"},
		{"token", "init", "5000"},
	} {
		if code, out, stderr := runCLI(t, args...); code != 2 || out != "" || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("%v: exit %d (want 2), stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}

// token next with no node running ends at once with one line naming the
// fix, not after its 30 s timeout with "deadline exceeded".
func TestCLINextWithNothingRunning(t *testing.T) {
	t.Parallel()
	addrs := []string{closedAddr(t), closedAddr(t), closedAddr(t)}
	code, out, stderr := runCLI(t, "token", "next", "--servers", strings.Join(addrs, ","), "order:1")
	if code != 1 || out != "" {
		t.Fatalf("exit %d (want 1), stdout %q, stderr %q", code, out, stderr)
	}
	if !strings.Contains(stderr, "start the token service (fencegate dev") || strings.Contains(stderr, "deadline") ||
		strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("stderr %q: want one line naming fencegate dev, without a deadline", stderr)
	}
}
