package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// cutPoint is where linkCutter breaks the link between the proxy and the
// server, relative to a client's simple-protocol Query "commit".
type cutPoint int

const (
	cutBeforeCommit cutPoint = iota // the COMMIT never reaches the server
	cutAfterCommit                  // the server committed; its answer is dropped
	cutWhenIdle                     // the link breaks while the session is idle
)

// linkCutter starts a relay on 127.0.0.1:0 in front of the server at addr
// that forwards both ways and, for each session, breaks the link (closes
// both of its connections) at the point given; cutIdle, when cut is
// cutWhenIdle, is closed by the test to break the links. It returns the
// relay's address.
func linkCutter(t *testing.T, addr string, cut cutPoint, cutIdle chan struct{}) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go relayCutting(c, addr, cut, cutIdle)
		}
	}()
	return ln.Addr().String()
}

func relayCutting(c net.Conn, addr string, cut cutPoint, cutIdle chan struct{}) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	if cut == cutWhenIdle {
		go func() {
			<-cutIdle
			c.Close()
			up.Close()
		}()
	}
	var first [8]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return
	}
	if _, err := up.Write(first[:]); err != nil {
		return
	}
	n := binary.BigEndian.Uint32(first[:4])
	if binary.BigEndian.Uint32(first[4:]) != pgproto3.ProtocolVersionNumber || n < 8 {
		go func() { _, _ = io.Copy(up, c) }()
		_, _ = io.Copy(c, up)
		return
	}
	rest := make([]byte, n-8)
	if _, err := io.ReadFull(c, rest); err != nil {
		return
	}
	if _, err := up.Write(rest); err != nil {
		return
	}
	committed := make(chan struct{}) // the server answered the COMMIT
	sent := make(chan struct{})      // the client's COMMIT went upstream
	go func() {
		r := bufio.NewReader(up)
		for {
			var h [5]byte
			if _, err := io.ReadFull(r, h[:]); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
			if _, err := io.ReadFull(r, body); err != nil {
				return
			}
			if h[0] == 'C' && bytes.Equal(body, []byte("COMMIT\x00")) && isClosed(sent) {
				close(committed)
				return
			}
			if _, err := c.Write(append(h[:], body...)); err != nil {
				return
			}
		}
	}()
	r := bufio.NewReader(c)
	for {
		var h [5]byte
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if h[0] == 'Q' && bytes.EqualFold(body, []byte("commit\x00")) {
			switch cut {
			case cutBeforeCommit:
				return
			case cutAfterCommit:
				close(sent)
				if _, err := up.Write(append(h[:], body...)); err != nil {
					return
				}
				select {
				case <-committed:
				case <-time.After(30 * time.Second):
				}
				return
			}
		}
		if _, err := up.Write(append(h[:], body...)); err != nil {
			return
		}
	}
}

// TestUpstreamLossMidCommitIsNoAnswer: when the link between the proxy and
// PostgreSQL breaks while a COMMIT is in flight, the client gets no error
// with a SQLSTATE (which every client reads as PostgreSQL's answer: not
// committed), but its connection closed, as straight to the server: the
// outcome is unknown, whether or not the row committed. A link that breaks
// while the session is idle still gets the proxy's FATAL 08006, which no
// request can mistake for its answer.
func TestUpstreamLossMidCommitIsNoAnswer(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	upstream := mustURL(t, fx.direct).Host
	for _, tc := range []struct {
		name      string
		cut       cutPoint
		committed bool
	}{
		{"before the COMMIT reached the server", cutBeforeCommit, false},
		{"after the server committed", cutAfterCommit, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay := linkCutter(t, upstream, tc.cut, nil)
			proxied := proxytest.Start(t, withHost(t, fx.direct, "postgres://"+relay))
			c := connect(t, proxied)
			state := "cut " + tc.name
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tok := time.Now().UnixNano()
			if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", tok); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "UPDATE orders SET state = $1 WHERE id = 42", state); err != nil {
				t.Fatal(err)
			}
			err = tx.Commit(ctx)
			var pe *pgconn.PgError
			if err == nil || errors.As(err, &pe) {
				t.Errorf("COMMIT with the link cut %s: %v; want the connection closed without an answer (no SQLSTATE)", tc.name, err)
			}
			var got string
			if err := connect(t, fx.admin).QueryRow(ctx, "SELECT state FROM orders WHERE id = 42").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if (got == state) != tc.committed {
				t.Errorf("state after the cut %s: %q; committed should be %v", tc.name, got, tc.committed)
			}
		})
	}

	t.Run("while idle", func(t *testing.T) {
		cut := make(chan struct{})
		relay := linkCutter(t, upstream, cutWhenIdle, cut)
		proxied := proxytest.Start(t, withHost(t, fx.direct, "postgres://"+relay))
		w := dialWire(t, proxied)
		close(cut)
		f := w.next()
		if f.typ != 'E' || errorOf(t, f).Code != "08006" {
			t.Fatalf("an idle session whose link broke got %v; want the proxy's FATAL 08006", f)
		}
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
