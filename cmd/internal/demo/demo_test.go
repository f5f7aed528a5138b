package demo

import (
	"context"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func runDemo(t *testing.T, redlock bool) *Result {
	t.Helper()
	// Built before the clock starts: a build on a busy machine can take
	// minutes.
	bin := testutil.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	addr, _ := testutil.Redis(t)
	pic := filepath.Join(t.TempDir(), "demo.svg")
	res, err := PausedHolder(ctx, Config{
		Binary:   bin,
		Redlock:  redlock,
		Postgres: testutil.PostgresAdminDSN(),
		Redis:    addr,
		Picture:  pic,
		Out:      testWriter{t},
		Logger:   testutil.Logger(t),
	})
	if err != nil {
		t.Fatalf("PausedHolder: %v", err)
	}
	checkSVG(t, pic)
	return res
}

// The verdicts below come from the rows the demo read back from PostgreSQL and
// the SQLSTATEs the client processes received, not from printed text.
func checkVerdicts(t *testing.T, res *Result) {
	t.Helper()
	a, b, c := res.Unprotected, res.Proxied, res.Direct
	if !(a.Token2 > a.Token1 && b.Token1 > a.Token2 && b.Token2 > b.Token1 && c.Token1 > b.Token2 && c.Token2 > c.Token1) {
		t.Errorf("tokens not increasing across grants: (a) %d,%d (b) %d,%d (c) %d,%d", a.Token1, a.Token2, b.Token1, b.Token2, c.Token1, c.Token2)
	}
	if a.Fenced || a.Protected || a.Proxy || !b.Fenced || !b.Protected || !b.Proxy || !c.Fenced || !c.Protected || c.Proxy {
		t.Errorf("runs not as described: (a) %+v (b) %+v (c) %+v", a, b, c)
	}
	if got, want := a.Order.Charges, 2; got != want {
		t.Errorf("(a) unprotected: %d charges, want %d (the stale write lands)", got, want)
	}
	if !a.Write1.OK || !a.Write2.OK {
		t.Errorf("(a) unprotected: writes %+v, %+v; want both committed", a.Write1, a.Write2)
	}
	for name, p := range map[string]Run{"(b) through the proxy": b, "(c) straight to PostgreSQL": c} {
		if got, want := p.Write1.SQLState, fencegate.CodeStaleToken; got != want || p.Write1.OK {
			t.Errorf("%s: client 1's write = %+v, want SQLSTATE %s", name, p.Write1, want)
		}
		if !p.Write2.OK {
			t.Errorf("%s: client 2's write = %+v, want committed", name, p.Write2)
		}
		if got, want := p.Order.Charges, 1; got != want {
			t.Errorf("%s: %d charges, want %d", name, got, want)
		}
		if p.Order.ChargedCents != p.Order.AmountCents || p.Order.State != "paid" {
			t.Errorf("%s: order %+v, want paid once", name, p.Order)
		}
	}
	if !res.StaleWriteRejected() {
		t.Errorf("StaleWriteRejected()=false for (b) %+v (c) %+v", b, c)
	}
}

func TestPausedHolder(t *testing.T) {
	res := runDemo(t, false)
	checkVerdicts(t, res)
	for _, r := range []Run{res.Unprotected, res.Proxied, res.Direct} {
		if !r.Held1 {
			t.Errorf("proxy=%v protected=%v: client 1 should have seen its lease valid just before the pause", r.Proxy, r.Protected)
		}
	}
}

func TestPausedHolderRedlock(t *testing.T) {
	res := runDemo(t, true)
	checkVerdicts(t, res)
	for _, r := range []Run{res.Unprotected, res.Proxied, res.Direct} {
		if !r.DoubleGrant() {
			t.Errorf("proxy=%v protected=%v: masters %q after client 2's grant; want client 1's key on a minority and client 2's on a majority", r.Proxy, r.Protected, r.Masters)
		}
	}
}

func checkSVG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("picture: %v", err)
	}
	defer f.Close()
	d := xml.NewDecoder(f)
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("picture %s is not well-formed: %v", path, err)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// hangingClient starts a client whose database never answers: its connect
// hangs (the listener accepts and says nothing) until the test ends.
func hangingClient(t *testing.T, name string) *clientProc {
	t.Helper()
	addr := testutil.Serve(t, func(net.Conn) {}) // accepts and never answers
	p, err := startClient(testutil.Binary(t), &ClientConfig{Name: name, Redis: []string{"127.0.0.1:1"},
		Tokens: []string{"http://127.0.0.1:1"}, DB: "postgres://x@" + addr + "/x?sslmode=disable",
		Resource: "r", OrderID: 1, TTL: time.Second, Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	return p
}

// pause returns only once every thread of the client is stopped: the demo
// sends client 1 its go-ahead right after, and a thread still running could
// act on it.
func TestPauseStopsAllThreads(t *testing.T) {
	p := hangingClient(t, "client 8")
	for i := 0; i < 20; i++ {
		if err := p.pause(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		stopped, err := proc.Stopped(p.p.Pid())
		if err != nil || !stopped {
			t.Fatalf("after pause: all threads stopped = %v, %v (state %s)", stopped, err, p.state())
		}
		if err := p.signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, "client to run again", func() error {
			if s := p.state(); strings.HasPrefix(s, "T") {
				return errors.New("still " + s)
			}
			return nil
		})
	}
}

// A client that hangs must explain itself: the error carries its process
// state and goroutine stacks, so that a stuck run in CI says where it was
// stuck.
func TestStuckClientExplains(t *testing.T) {
	p := hangingClient(t, "client 9")
	_, err := p.next(context.Background(), 2*time.Second, evAcquired)
	if !errors.Is(err, ErrClient) || !strings.Contains(err.Error(), "goroutine") || !strings.Contains(err.Error(), "RunClient") ||
		!strings.Contains(err.Error(), "process state S") {
		t.Fatalf("error of a stuck client = %v; want ErrClient with its process state and goroutine stacks", err)
	}
}
