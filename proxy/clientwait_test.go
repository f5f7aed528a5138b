package proxy_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5/pgproto3"
)

// TestIdleClientWaitsAreTimed: a fenced transaction through the gate, with
// the server's own limits switched off, then a client that leaves the
// server waiting on it without being idle by ReadyForQuery: stopped in the
// middle of a message, a Flush answered and no Sync, an error in an
// unsynced batch, COPY FROM STDIN with no data, a result it does not read.
// The gate's limit (1 s) ends each session: its backend goes, and a newer
// holder of the resource fences at once. Before, each of them held its
// fence for as long as the client liked.
func TestIdleClientWaitsAreTimed(t *testing.T) {
	fx := newFixture(t, proxytest.WithConfig(func(c *proxy.Config) { c.IdleInTransactionTimeout = time.Second }))
	halfMessage := func(declared, sent int) func(*wire) {
		return func(w *wire) {
			b := make([]byte, 5+sent)
			b[0] = 'Q'
			binary.BigEndian.PutUint32(b[1:], uint32(4+declared))
			copy(b[5:], strings.Repeat(" ", sent))
			copy(b[5:], "select 1")
			if _, err := w.c.Write(b); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		stall func(w *wire)
		fatal string // the last SQLSTATE the client is told, "" for none; "-": not checked
	}{
		{"HalfMessageSmall", halfMessage(1000, 8), "25P03"},
		{"HalfMessageLarge", halfMessage(1<<20, 100<<10), ""},
		{"UnsyncedParse", func(w *wire) {
			w.send(&pgproto3.Parse{Name: "s1", Query: "select 1"}, &pgproto3.Flush{})
		}, ""},
		{"UnsyncedBindExecute", func(w *wire) {
			w.send(&pgproto3.Parse{Query: "select generate_series(1, 10)"}, &pgproto3.Bind{},
				&pgproto3.Execute{MaxRows: 1}, &pgproto3.Flush{})
		}, ""},
		{"ErrorInUnsyncedBatch", func(w *wire) {
			w.send(&pgproto3.Parse{Query: "select 1/0"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
		}, "22012"}, // the server's own error, and nothing from the gate after it
		{"CopyInStalled", func(w *wire) {
			w.send(&pgproto3.Query{String: "CREATE TEMP TABLE t (x int); COPY t FROM STDIN"})
		}, ""},
		{"SlowReader", func(w *wire) {
			w.send(&pgproto3.Query{String: "SELECT repeat('x', 1000000) FROM generate_series(1, 200)"})
		}, "-"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := fmt.Sprintf("order:%d", 200+i)
			w, pid := fencedHolder(t, fx, res, 10)
			tc.stall(w)
			waitBackendGone(t, fx, pid)
			// A newer holder fences at once.
			fencedExec(t, fx.proxied, res, 11, "SELECT 1")
			if tc.fatal == "-" {
				return // it reads nothing
			}
			if got := finalError(t, w); got != tc.fatal {
				t.Errorf("the client was told SQLSTATE %q, want %q", got, tc.fatal)
			}
		})
	}
}

// TestIdleBusyServerIsNotTimed: a client waiting on the server inside a
// transaction is not timed, however long the server works: an extended
// statement flushed with no Sync, and a COPY fed slowly but steadily,
// each for longer than the limit.
func TestIdleBusyServerIsNotTimed(t *testing.T) {
	fx := newFixture(t, proxytest.WithConfig(func(c *proxy.Config) { c.IdleInTransactionTimeout = time.Second }))
	t.Run("UnsyncedLongExecute", func(t *testing.T) {
		t.Parallel()
		w, _ := fencedHolder(t, fx, "order:300", 10)
		w.send(&pgproto3.Parse{Query: "select pg_sleep(2.5)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Flush{})
		w.until('C', 1)
		w.send(&pgproto3.Sync{})
		w.ready(1)
		w.send(&pgproto3.Query{String: "COMMIT"})
		w.ready(1)
		requireNoError(t, w)
	})
	t.Run("SteadyCopy", func(t *testing.T) {
		t.Parallel()
		w, _ := fencedHolder(t, fx, "order:301", 10)
		w.send(&pgproto3.Query{String: "CREATE TEMP TABLE t (x int); COPY t FROM STDIN"})
		w.until('G', 1)
		for i := range 10 {
			w.send(&pgproto3.CopyData{Data: fmt.Appendf(nil, "%d\n", i)})
			time.Sleep(300 * time.Millisecond)
		}
		w.send(&pgproto3.CopyDone{})
		w.ready(1)
		w.send(&pgproto3.Query{String: "COMMIT"})
		w.ready(1)
		requireNoError(t, w)
	})
}

// fencedHolder opens a raw session through the gate that fences res with
// token in a transaction, its server-side limits off, and returns it with
// its backend's process ID.
func fencedHolder(t *testing.T, fx fixture, res string, token int64) (*wire, int32) {
	t.Helper()
	w := dialWire(t, fx.proxied)
	w.send(&pgproto3.Query{String: fmt.Sprintf("SET idle_in_transaction_session_timeout = 0; SET statement_timeout = 0; BEGIN; SELECT fencegate.fence('%s', %d)", res, token)})
	w.ready(1)
	requireNoError(t, w)
	w.got = nil
	return w, int32(w.pid)
}

func requireNoError(t *testing.T, w *wire) {
	t.Helper()
	for _, f := range w.got {
		if f.typ == 'E' {
			t.Fatalf("error: %s", errorOf(t, f).Message)
		}
	}
}

func waitBackendGone(t *testing.T, fx fixture, pid int32) {
	t.Helper()
	admin := connect(t, fx.admin)
	testutil.WaitFor(t, 15*time.Second, "the stalled holder's backend to end", func() error {
		var state string
		err := admin.QueryRow(context.Background(), "SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state)
		if err == nil {
			return fmt.Errorf("still there, %s", state)
		}
		return nil
	})
}

// finalError reads what the gate sent until it closed the connection and
// returns the SQLSTATE of the last ErrorResponse ("" for none).
func finalError(t *testing.T, w *wire) string {
	t.Helper()
	_ = w.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	code := ""
	for {
		var h [5]byte
		if _, err := io.ReadFull(w.r, h[:]); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
				t.Errorf("reading until the close: %v", err)
			}
			return code
		}
		body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
		if _, err := io.ReadFull(w.r, body); err != nil {
			return code
		}
		if h[0] == 'E' {
			code = errorOf(t, frame{h[0], body}).Code
		}
	}
}
