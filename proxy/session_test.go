package proxy_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

func TestCancelRequest(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	c := connect(t, fx.proxied)
	other := connect(t, fx.proxied) // a second session that must not be cancelled
	done := make(chan error, 1)
	go func() {
		_, err := c.Exec(ctx, "SELECT pg_sleep(30)")
		done <- err
	}()
	testutil.WaitFor(t, 10*time.Second, "pg_sleep to run", func() error {
		var n int
		if err := connect(t, fx.admin).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(30)' AND state = 'active'").Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d sleeping", n)
		}
		return nil
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.PgConn().CancelRequest(cctx); err != nil {
		t.Fatalf("cancel request: %v", err)
	}
	if err := <-done; sqlstate(err) != "57014" {
		t.Fatalf("cancelled query: %v, want SQLSTATE 57014", err)
	}
	var one int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("session after cancel: %v", err)
	}
	if err := other.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("other session: %v", err)
	}
}

func TestClientDisconnectRollsBack(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(fx.proxied)
	if err != nil {
		t.Fatal(err)
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', 5)"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'half-done' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	// Drop the TCP connection without a Terminate message.
	c.PgConn().Conn().Close()
	testutil.WaitFor(t, 10*time.Second, "the upstream session to end", func() error {
		var n int
		if err := connect(t, fx.admin).QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in transaction%'").Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("%d sessions still in a transaction", n)
		}
		return nil
	})
	if got, want := state(t, fx.admin, 42), "new"; got != want {
		t.Fatalf("state = %q, want %q", got, want)
	}
	// The mark's lock was released with the rollback: token 5 works again.
	d := connect(t, fx.proxied)
	if err := pgx.BeginFunc(ctx, d, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT fencegate.fence('order:42', 5)")
		return err
	}); err != nil {
		t.Fatalf("fence after rollback: %v", err)
	}
}

// rawConn opens a TCP connection to the proxy of dsn.
func rawConn(t *testing.T, dsn string) net.Conn {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func startupBytes(t *testing.T, dsn string) []byte {
	u, _ := url.Parse(dsn)
	b, err := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": u.User.Username(), "database": strings.TrimPrefix(u.Path, "/")}}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readUntilReady reads backend messages until ReadyForQuery.
func readUntilReady(t *testing.T, c net.Conn) {
	t.Helper()
	fe := pgproto3.NewFrontend(c, c)
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatalf("read startup answer: %v", err)
		}
		if _, ok := m.(*pgproto3.ReadyForQuery); ok {
			return
		}
	}
}

// expectProtocolError reads until the proxy closes the connection and
// checks that it sent an ErrorResponse with SQLSTATE 08P01 before.
func expectProtocolError(t *testing.T, c net.Conn) {
	t.Helper()
	fe := pgproto3.NewFrontend(c, c)
	var codes []string
	for {
		m, err := fe.Receive()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "reset") {
				t.Logf("read: %v", err)
			}
			break
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			codes = append(codes, e.Code)
		}
	}
	if len(codes) == 0 || codes[len(codes)-1] != "08P01" {
		t.Fatalf("errors before close = %v, want a final 08P01", codes)
	}
}

func TestHostileInput(t *testing.T) {
	fx := newFixture(t)
	dsn, p := fx.proxied, fx.p
	startup := startupBytes(t, dsn)
	be32 := func(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	cases := []struct {
		name      string
		afterAuth bool
		bytes     []byte
	}{
		{"garbage before startup", false, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")},
		{"negative startup length", false, be32(-8)},
		{"oversized startup length", false, append(be32(1<<30), 0, 3, 0, 0)},
		{"unknown protocol", false, append(be32(8), 0, 2, 0, 0)},
		{"SSLRequest then pipelined plaintext", false, append(append(be32(8), be32(80877103)...), startup...)},
		{"second StartupMessage", true, startup},
		{"oversized message", true, append([]byte{'Q'}, be32(0x7ffffff0)...)},
		{"negative message length", true, append([]byte{'Q'}, be32(-1)...)},
		{"short message length", true, append([]byte{'Q'}, be32(2)...)},
		{"unknown message type", true, append([]byte{'z'}, be32(4)...)},
		{"password message after auth", true, append([]byte{'p'}, append(be32(9), "hello"...)...)},
		{"Describe without a target", true, append([]byte{'D'}, be32(4)...)},
		{"Close of an unknown kind", true, append([]byte{'C'}, append(be32(7), "X\x00x"...)...)},
		// Malformed bodies the proxy has no reason to read go to
		// PostgreSQL, which answers with its own 08P01 error and goes on
		// (see TestServerJudgesMessageBodies).
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := rawConn(t, dsn)
			if tc.afterAuth {
				if _, err := c.Write(startup); err != nil {
					t.Fatal(err)
				}
				readUntilReady(t, c)
			}
			if _, err := c.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(tc.name, "SSLRequest") {
				// The proxy has no TLS: it answers 'N' and then reads the
				// startup that followed, which is fine in plaintext. With
				// TLS configured see TestClientTLSRejectsPipelinedPlaintext.
				var b [1]byte
				if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'N' {
					t.Fatalf("SSLRequest answer %q, %v", b[0], err)
				}
				readUntilReady(t, c)
				return
			}
			expectProtocolError(t, c)
		})
	}
	// The proxy still serves, and nothing reached the upstream as SQL.
	ctx := context.Background()
	var n int
	if err := connect(t, dsn).QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil || n != 2 {
		t.Fatalf("after hostile input: count = %d, %v", n, err)
	}
	// All but the SSLRequest case.
	if got, want := testutilCounter(p.Metrics().ProtocolErrors), float64(len(cases)-1); got != want {
		t.Fatalf("protocol errors counted = %v, want %v", got, want)
	}
}

// A message whose framing is sound but whose body is not (a string without
// its NUL) goes to PostgreSQL as it came, and the client gets what
// PostgreSQL answers a direct client: an 08P01 error, and the session goes
// on.
func TestServerJudgesMessageBodies(t *testing.T) {
	fx := newFixture(t)
	be32 := func(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
	for _, bad := range [][]byte{
		append([]byte{'Q'}, append(be32(8), "DROP"...)...),
		append(append([]byte{'P'}, append(be32(8), "abcd"...)...), 'S', 0, 0, 0, 4),
	} {
		var got [2][]frame
		for i, dsn := range []string{fx.direct, fx.proxied} {
			w := dialWire(t, dsn)
			if _, err := w.c.Write(bad); err != nil {
				t.Fatal(err)
			}
			w.ready(1)
			w.send(&q{String: "SELECT 'alive'"})
			w.ready(1)
			got[i] = w.got
		}
		if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
			t.Fatalf("%q:\n direct:  %v\n proxied: %v", bad, got[0], got[1])
		}
		if !strings.Contains(fmt.Sprint(got[1]), "C08P01") {
			t.Fatalf("%q: %v, want an 08P01 error", bad, got[1])
		}
	}
}

func TestUpstreamDownGivesCleanError(t *testing.T) {
	addr := testutil.FreeAddr(t) // nothing listens here
	dsn := proxytest.Start(t, "postgres://postgres@"+addr+"/postgres?sslmode=disable")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgconn.Connect(ctx, dsn)
	if sqlstate(err) != "08006" {
		t.Fatalf("connect with the upstream down: %v, want SQLSTATE 08006", err)
	}
}
