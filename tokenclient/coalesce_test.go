package tokenclient_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// The coalescer against a real cluster (tokenservicetest): concurrent calls
// share HTTP requests and still get distinct tokens in real-time order.

// countingTransport counts the token requests sent through it.
type countingTransport struct{ n atomic.Int64 }

func (ct *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/v1/tokens" {
		ct.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Concurrent calls on one client share HTTP requests, and still get distinct
// tokens in real-time order, both through the leader and through a follower
// that forwards.
func TestCoalescingDistinctOrderedFewerRequests(t *testing.T) {
	c := tokenservicetest.StartCluster(t, 3)
	leader := c.Leader(t)
	follower := (leader + 1) % 3
	var viaAll, viaFollower countingTransport
	clAll := c.Client(t, tokenclient.WithHTTPClient(&http.Client{Transport: &viaAll}))
	clFollower := c.ClientFor(t, []string{c.APIURL(follower)}, tokenclient.WithFollowLeader(false),
		tokenclient.WithHTTPClient(&http.Client{Transport: &viaFollower}))
	const total, workers = 4000, 64
	ops := runCallers(t, []*tokenclient.Client{clAll, clFollower}, total, workers)
	history.Check(t, ops)
	nAll, nFollower := viaAll.n.Load(), viaFollower.n.Load()
	t.Logf("%d calls in %d HTTP requests (%d via all nodes, %d via follower %s)", total, nAll+nFollower, nAll, nFollower, c.ID(follower))
	if nAll >= total/2 || nFollower >= total/2 {
		t.Fatalf("HTTP requests: %d and %d for %d calls each; want fewer than calls", nAll, nFollower, total/2)
	}
}

// With coalescing off, every call is its own HTTP request.
func TestCoalescingOff(t *testing.T) {
	c := tokenservicetest.StartCluster(t, 3)
	var ct countingTransport
	cl := c.Client(t, tokenclient.WithCoalescing(false), tokenclient.WithHTTPClient(&http.Client{Transport: &ct}))
	const total = 400
	ops := runCallers(t, []*tokenclient.Client{cl}, total, 16)
	history.Check(t, ops)
	if n := ct.n.Load(); n < total {
		t.Fatalf("%d HTTP requests for %d calls with coalescing off", n, total)
	}
}

// A caller whose context has ended gets the context's error.
func TestCoalescingCanceledCaller(t *testing.T) {
	c := tokenservicetest.StartCluster(t, 3)
	cl := c.Client(t)
	tokenservicetest.Mint(t, cl, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := cl.Next(ctx, "r"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next with a canceled context = %v, want context.Canceled", err)
	}
	tokenservicetest.Mint(t, cl, 3)
}

// runCallers makes total NextToken calls from workers goroutines over
// clients (worker w uses clients[w%len]) and returns the recorded history.
func runCallers(t *testing.T, clients []*tokenclient.Client, total, workers int) []history.Op {
	t.Helper()
	return history.Drive(t, total, workers, func(ctx context.Context, w int, res string) (int64, error) {
		return clients[w%len(clients)].NextToken(ctx, res)
	})
}
