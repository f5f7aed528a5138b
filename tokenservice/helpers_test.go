package tokenservice_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// maxStatusToken returns the largest last_token any running node reports.
func maxStatusToken(c *tokenservicetest.Cluster) int64 {
	var m int64
	for i := range c.Len() {
		if n := c.Node(i); n != nil {
			m = max(m, n.LocalStatus().LastToken)
		}
	}
	return m
}

// load runs workers goroutines that call Next through clients (worker w uses
// clients[w%len]) and record every operation, until stop is closed.
type load struct {
	rec     *history.Recorder
	wg      sync.WaitGroup
	stop    chan struct{}
	mu      sync.Mutex
	okCount int
}

func startLoad(clients []*tokenclient.Client, workers int) *load {
	l := &load{rec: history.NewRecorder(), stop: make(chan struct{})}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			cl := clients[w%len(clients)]
			res := fmt.Sprintf("res-%d", w%4)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				h := l.rec.Begin(w, res)
				tok, err := cl.NextToken(ctx, res)
				l.rec.End(h, tok, err)
				cancel()
				if err == nil {
					l.mu.Lock()
					l.okCount++
					l.mu.Unlock()
				}
			}
		}()
	}
	return l
}

func (l *load) ok() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.okCount
}

// waitProgress waits until n more operations have succeeded.
func (l *load) waitProgress(t testing.TB, n int, what string) {
	t.Helper()
	target := l.ok() + n
	deadline := time.Now().Add(30 * time.Second)
	for l.ok() < target {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d more tokens %s", n, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *load) finish() []history.Op {
	close(l.stop)
	l.wg.Wait()
	return l.rec.Ops()
}

// isRetryable reports whether err is one of the service's retryable failures.
func isRetryable(err error) bool {
	return errors.Is(err, tokenapi.ErrNoQuorum) || errors.Is(err, tokenapi.ErrUnavailable) ||
		errors.Is(err, tokenapi.ErrNotLeader) || errors.Is(err, context.DeadlineExceeded)
}

// runCallers makes total NextToken calls from workers goroutines over
// clients (worker w uses clients[w%len]) and returns the recorded history.
func runCallers(t *testing.T, clients []*tokenclient.Client, total, workers int) []history.Op {
	t.Helper()
	return history.Drive(t, total, workers, func(ctx context.Context, w int, res string) (int64, error) {
		return clients[w%len(clients)].NextToken(ctx, res)
	})
}

// Nodes started in this process never pick ports: loopbackAddr binds
// 127.0.0.1:0 and keeps the listener, and bound hands it to the node that
// starts on that address (or binds the address again for a restart).
var (
	heldMu sync.Mutex
	// held maps an address from loopbackAddr to its listener, nil once a
	// node took it.
	held = map[string]net.Listener{}
)

// loopbackAddr returns "127.0.0.1:PORT" of a listener bound to
// 127.0.0.1:0, kept for the node that bound starts there.
func loopbackAddr(t testing.TB) string {
	t.Helper()
	testutil.NeedServices(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	heldMu.Lock()
	defer heldMu.Unlock()
	held[ln.Addr().String()] = ln
	return ln.Addr().String()
}

// closedAddr returns an address that refuses connections (see
// testutil.ClosedAddr). No node ever starts there.
func closedAddr(t testing.TB) string {
	t.Helper()
	return testutil.ClosedAddr(t)
}

// bound returns cfg with the listeners of its Raft and API addresses when
// loopbackAddr made them: the kept listener the first time, else the
// address bound again (a restart), retried for up to 10s while a socket of
// the node's last run closes. Other addresses are left to Start.
func bound(t testing.TB, cfg tokenservice.Config) tokenservice.Config {
	t.Helper()
	take := func(addr string) net.Listener {
		heldMu.Lock()
		ln, ok := held[addr]
		if ok {
			held[addr] = nil
		}
		heldMu.Unlock()
		if !ok {
			return nil
		}
		deadline := time.Now().Add(10 * time.Second)
		for ln == nil {
			var err error
			if ln, err = net.Listen("tcp", addr); err != nil {
				if time.Now().After(deadline) {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		return ln
	}
	if ln := take(cfg.RaftAddr); ln != nil {
		cfg.RaftListener = ln
	}
	api := cfg.APIAddr
	if _, rest, ok := strings.Cut(api, "://"); ok {
		api = rest
	}
	if ln := take(api); ln != nil {
		cfg.APIListener = ln
	}
	return cfg
}
