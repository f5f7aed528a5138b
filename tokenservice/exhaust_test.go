package tokenservice_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// The counter's ceiling. 'token init' and 'token restore' refuse a value
// above 2^62 unless forced; forced to 20 below the largest token, the
// cluster hands out every token up to math.MaxInt64, through the leader
// and through a follower, and then answers every request with the typed
// exhausted error (HTTP 409, code "exhausted"), never with a smaller
// token. Before, the last reservation (65536 tokens) did not fit: the
// tokens below the top were never handed out and the error was a generic
// internal one.
func TestCounterExhausted(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	servers := strings.Join(c.APIURLs(), ",")
	nearTop := strconv.FormatInt(math.MaxInt64-20, 10)

	code, out, stderr := runCLI(t, "token", "init", "--initial-token", nearTop, "--servers", servers)
	if code != 2 || out != "" || !strings.Contains(stderr, "need --force") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("init above the ceiling without --force: exit %d (want 2), stdout %q, stderr %q", code, out, stderr)
	}
	ceiling := strconv.FormatInt(raftstore.CounterCeiling, 10)
	if code, out, stderr := runCLI(t, "token", "init", "--initial-token", ceiling, "--servers", servers); code != 0 {
		t.Fatalf("init at the ceiling: exit %d:\n%s%s", code, out, stderr)
	}
	snap := filepath.Join(t.TempDir(), "snap.json")
	if code, out, stderr := runCLI(t, "token", "snapshot", "--out", snap, "--servers", servers); code != 0 {
		t.Fatalf("snapshot: exit %d:\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, "token", "restore", "--from", snap, "--margin", "1", "--servers", servers)
	if code != 2 || out != "" || !strings.Contains(stderr, "need --force") {
		t.Fatalf("restore above the ceiling without --force: exit %d (want 2), stdout %q, stderr %q", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, "token", "init", "--initial-token", nearTop, "--force", "--servers", servers); code != 0 {
		t.Fatalf("init --force near the largest token: exit %d:\n%s%s", code, out, stderr)
	}

	leader := c.Leader(t)
	follower := (leader + 1) % 3
	viaLeader := c.ClientFor(t, []string{c.APIURL(leader)}, tokenclient.WithFollowLeader(false))
	viaFollower := c.ClientFor(t, []string{c.APIURL(follower)}, tokenclient.WithFollowLeader(false))
	toks := append(tokenservicetest.Mint(t, viaLeader, 10), tokenservicetest.Mint(t, viaFollower, 10)...)
	for i, tok := range toks {
		if want := int64(math.MaxInt64 - 19 + i); tok != want {
			t.Fatalf("token #%d = %d, want %d (every token up to the largest)", i, tok, want)
		}
	}
	for name, cl := range map[string]*tokenclient.Client{"leader": viaLeader, "follower": viaFollower} {
		for range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			tok, err := cl.NextToken(ctx, "orders/42")
			cancel()
			var ae *tokenapi.APIError
			if !errors.Is(err, tokenapi.ErrExhausted) || !errors.As(err, &ae) {
				t.Fatalf("through the %s after the largest token: NextToken = %d, %v; want tokenapi.ErrExhausted", name, tok, err)
			}
			if ae.Status != http.StatusConflict || ae.Code != tokenapi.CodeExhausted || ae.Retryable() {
				t.Fatalf("through the %s: status %d, code %q, retryable %v; want 409, %q, not retryable",
					name, ae.Status, ae.Code, ae.Retryable(), tokenapi.CodeExhausted)
			}
			t.Logf("through the %s: %v", name, err)
		}
	}
}
