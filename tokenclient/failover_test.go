package tokenclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// closedNodeURLs returns n distinct URLs of loopback ports that refuse
// connections (testutil.ClosedAddr).
func closedNodeURLs(t *testing.T, n int) []string {
	t.Helper()
	urls := make([]string, n)
	for i := range urls {
		urls[i] = "http://" + testutil.ClosedAddr(t)
	}
	return urls
}

// TestClientGivesUpWhenNothingRuns: with every node down, Next returns
// ErrNotRunning, naming the fix, long before the caller's deadline, and it
// does so under a context without a deadline too.
func TestClientGivesUpWhenNothingRuns(t *testing.T) {
	testutil.NeedServices(t)
	urls := append(closedNodeURLs(t, 2), "http://no-such-node.invalid:7101")
	c, err := NewClient(urls, WithCoalescing(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, ctx := range []context.Context{context.Background(), failDeadline(t, time.Minute)} {
		_, err := c.Next(ctx, "order:1")
		if !errors.Is(err, ErrNotRunning) || !errors.Is(err, tokenapi.ErrUnavailable) {
			t.Fatalf("Next with every node down: %v, want ErrNotRunning (and tokenapi.ErrUnavailable)", err)
		}
		if ctx.Err() != nil {
			t.Fatalf("Next waited for the caller's deadline: %v", err)
		}
		for _, want := range []string{"fencegate dev", "check the server URLs", urls[0], urls[2]} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
	}
}

// TestClientKeepsTryingWhileANodeAnswers: one node that answers "no quorum"
// (an election under way) keeps the client retrying until its deadline, even
// though the other nodes refuse connections; the error then names each
// node's failure in its own words.
func TestClientKeepsTryingWhileANodeAnswers(t *testing.T) {
	testutil.NeedServices(t)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte(`{"error":"tokenservice: no quorum: node n2 knows no leader","code":"no_quorum"}`))
	}))
	defer srv.Close()
	urls := append(closedNodeURLs(t, 2), srv.URL)
	c, err := NewClient(urls, WithCoalescing(false), WithBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := failDeadline(t, 500*time.Millisecond)
	_, err = c.Next(ctx, "order:1")
	if err == nil || errors.Is(err, ErrNotRunning) {
		t.Fatalf("Next: %v, want a failure at the deadline, not ErrNotRunning", err)
	}
	if !errors.Is(err, tokenapi.ErrNoQuorum) {
		t.Errorf("error %q does not carry the answering node's no_quorum", err)
	}
	for _, want := range []string{"(refused: nothing listens)", "(answered: no leader)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if calls.Load() < 2 {
		t.Errorf("the answering node was tried %d times, want retries", calls.Load())
	}
}

// TestClientNoPingPong: two nodes that each name the other as leader make
// the client pause between rounds instead of bouncing as fast as it can.
func TestClientNoPingPong(t *testing.T) {
	testutil.NeedServices(t)
	var calls atomic.Int32
	var a, b *httptest.Server
	handler := func(other **httptest.Server) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"tokenservice: not leader","code":"not_leader","leader_api":"` + (*other).URL + `","leader_id":"x"}`))
		}
	}
	a = httptest.NewServer(handler(&b))
	b = httptest.NewServer(handler(&a))
	defer a.Close()
	defer b.Close()
	c, err := NewClient([]string{a.URL, b.URL}, WithCoalescing(false), WithBackoff(50*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Next(failDeadline(t, 300*time.Millisecond), "order:1")
	if err == nil {
		t.Fatal("Next succeeded against two nodes that know no leader")
	}
	// Without pauses a loopback client makes thousands of calls in 300ms;
	// with at most one hint per node per round and a pause of up to 50ms
	// between rounds, it makes a few dozen at most.
	if n := calls.Load(); n > 200 {
		t.Errorf("%d calls in 300ms: the client bounces between nodes without pausing", n)
	}
}

func failDeadline(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestCloseWaitsForSenders: Close ends a coalesced request in flight, the
// caller waiting for it returns, and no sender goroutine outlives Close.
func TestCloseWaitsForSenders(t *testing.T) {
	testutil.NeedServices(t)
	arrived := make(chan struct{}, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // the server notices a closed connection only after the body
		arrived <- struct{}{}
		<-r.Context().Done() // never answers
	}))
	defer srv.Close()
	c, err := NewClient([]string{srv.URL}, WithAttemptTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Next(context.Background(), "order:1")
		done <- err
	}()
	<-arrived
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c.queueMu.Lock()
	left := len(c.sending)
	c.queueMu.Unlock()
	if left != 0 {
		t.Errorf("%d senders still registered after Close", left)
	}
	if err := <-done; !errors.Is(err, tokenapi.ErrUnavailable) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Next across Close: %v, want tokenapi.ErrUnavailable saying the client was closed", err)
	}
	if _, err := c.Next(context.Background(), "order:2"); !errors.Is(err, tokenapi.ErrUnavailable) {
		t.Errorf("Next after Close: %v, want tokenapi.ErrUnavailable", err)
	}
}
