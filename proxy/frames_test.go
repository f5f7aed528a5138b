package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/jackc/pgx/v5/pgproto3"
)

// wire is a raw PostgreSQL client: it sends messages encoded by pgproto3 and
// records every frame the server (or the proxy) sends after startup, byte
// for byte.
type wire struct {
	t      *testing.T
	addr   string
	c      net.Conn
	r      *bufio.Reader
	pid    uint32
	secret []byte
	got    []frame
}

type frame struct {
	typ  byte
	body []byte
}

func (f frame) String() string {
	if len(f.body) > 64 {
		return fmt.Sprintf("%c %q...(%d bytes)", f.typ, f.body[:64], len(f.body))
	}
	return fmt.Sprintf("%c %q", f.typ, f.body)
}

// dialWire connects to the server of dsn as its user and database and
// completes the startup (trust authentication).
func dialWire(t *testing.T, dsn string) *wire {
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
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	w := &wire{t: t, addr: u.Host, c: c, r: bufio.NewReader(c)}
	w.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{
		"user": u.User.Username(), "database": strings.TrimPrefix(u.Path, "/"),
	}})
	for {
		f := w.next()
		switch f.typ {
		case 'K':
			w.pid, w.secret = binary.BigEndian.Uint32(f.body), f.body[4:]
		case 'E':
			t.Fatalf("startup: %s", f)
		case 'Z':
			return w
		}
	}
}

func (w *wire) send(msgs ...pgproto3.FrontendMessage) {
	w.t.Helper()
	var b []byte
	var err error
	for _, m := range msgs {
		if b, err = m.Encode(b); err != nil {
			w.t.Fatal(err)
		}
	}
	if _, err := w.c.Write(b); err != nil {
		w.t.Fatalf("send: %v", err)
	}
}

// next reads one frame without recording it.
func (w *wire) next() frame {
	w.t.Helper()
	var h [5]byte
	if _, err := io.ReadFull(w.r, h[:]); err != nil {
		w.t.Fatalf("read: %v (so far: %v)", err, w.got)
	}
	body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
	if _, err := io.ReadFull(w.r, body); err != nil {
		w.t.Fatalf("read: %v", err)
	}
	return frame{h[0], body}
}

// until records frames up to and including the n-th of type typ.
func (w *wire) until(typ byte, n int) {
	w.t.Helper()
	for n > 0 {
		f := w.next()
		w.got = append(w.got, f)
		if f.typ == typ {
			n--
		}
	}
}

// ready records frames up to the n-th ReadyForQuery.
func (w *wire) ready(n int) { w.until('Z', n) }

// cancel sends a CancelRequest for this session's key.
func (w *wire) cancel() {
	w.t.Helper()
	c, err := net.DialTimeout("tcp", w.addr, 5*time.Second)
	if err != nil {
		w.t.Fatal(err)
	}
	defer c.Close()
	b, _ := (&pgproto3.CancelRequest{ProcessID: w.pid, SecretKey: w.secret}).Encode(nil)
	if _, err := c.Write(b); err != nil {
		w.t.Fatal(err)
	}
	_, _ = c.Read(make([]byte, 1)) // the server hangs up once it has the request
}

// normalized returns the recorded frames with what differs between two
// sessions by nature, the process ID in a NotificationResponse, replaced:
// by zero when it is the process ID this client was given in its
// BackendKeyData (a notification the session sent itself, as a client
// tells by comparing the two), else by 0xffffffff. So a proxy that gave
// the client any other process ID than its backend's makes the frames
// differ.
func (w *wire) normalized() []frame {
	out := slices.Clone(w.got)
	for i, f := range out {
		if f.typ == 'A' && len(f.body) >= 4 {
			pid := []byte{0xff, 0xff, 0xff, 0xff}
			if binary.BigEndian.Uint32(f.body) == w.pid {
				pid = []byte{0, 0, 0, 0}
			}
			out[i].body = append(pid, f.body[4:]...)
		}
	}
	return out
}

// sequence is one exchange, run once straight to PostgreSQL and once
// through the proxy.
type sequence struct {
	name string
	run  func(w *wire, env *frameEnv)
	// ambiguous marks an exchange after which the proxy cannot know
	// whether the server ignored one of the client's Syncs (a failed
	// COPY FROM STDIN with Syncs sent during it, and nothing after; see
	// track.go): it must then count the session busy, never idle.
	ambiguous bool
	// fences is how many fences the proxy must count as accepted.
	fences float64
}

// frameEnv is what sequences need besides the connection.
type frameEnv struct {
	t        *testing.T
	admin    string
	int4pl   uint32 // OID of int4pl(int4, int4)
	int4div  uint32
	bigParam []byte
}

// waitActive waits until a backend of the database runs query.
func (e *frameEnv) waitActive(query string) {
	c := connect(e.t, e.admin)
	testutil.WaitFor(e.t, 10*time.Second, "the query to run", func() error {
		var n int
		if err := c.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND state = 'active'", query).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("not running yet")
		}
		return nil
	})
}

type (
	q  = pgproto3.Query
	pm = pgproto3.Parse
	bm = pgproto3.Bind
	dm = pgproto3.Describe
	em = pgproto3.Execute
	sm = pgproto3.Sync
	cm = pgproto3.Close
	hm = pgproto3.Flush
)

func copyData(s string) *pgproto3.CopyData { return &pgproto3.CopyData{Data: []byte(s)} }

var sequences = []sequence{
	{name: "simple query", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "SELECT 1 AS a, 'x'::text AS b, NULL::int AS c"})
		w.ready(1)
	}},
	{name: "simple query, error mid-string", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "SELECT 1; SELECT 1/0; SELECT 2"})
		w.ready(1)
	}},
	{name: "simple queries pipelined, failed transaction", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "BEGIN"}, &q{String: "INSERT INTO t VALUES (1, 'a')"}, &q{String: "SELECT 1/0"},
			&q{String: "SELECT 1"}, &q{String: "ROLLBACK"}, &q{String: "SELECT count(*) FROM t"})
		w.ready(6)
	}},
	{name: "empty queries", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: ""}, &q{String: ";"}, &pm{}, &bm{}, &em{}, &sm{})
		w.ready(3)
	}},
	{name: "extended pipeline with named statement and portal", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Name: "s1", Query: "SELECT $1::int + 1 AS n", ParameterOIDs: []uint32{23}}, &dm{ObjectType: 'S', Name: "s1"},
			&bm{DestinationPortal: "p1", PreparedStatement: "s1", Parameters: [][]byte{[]byte("41")}}, &dm{ObjectType: 'P', Name: "p1"},
			&em{Portal: "p1"}, &bm{PreparedStatement: "s1", Parameters: [][]byte{[]byte("1")}, ResultFormatCodes: []int16{1}},
			&em{}, &cm{ObjectType: 'P', Name: "p1"}, &cm{ObjectType: 'S', Name: "s1"}, &cm{ObjectType: 'S', Name: "never-prepared"}, &sm{})
		w.ready(1)
	}},
	{name: "error mid-batch skips to Sync", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "SELECT 1"}, &bm{}, &em{},
			&pm{Query: "SELEC oops"}, &bm{}, &em{},
			&pm{Query: "SELECT 3"}, &bm{}, &em{}, &sm{},
			&q{String: "SELECT 4"})
		w.ready(2)
	}},
	{name: "error then Query before Sync", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "SELECT 1/0"}, &bm{}, &em{}, &q{String: "INSERT INTO t VALUES (2, 'skipped')"}, &sm{})
		w.ready(1)
		w.send(&q{String: "SELECT count(*) FROM t"})
		w.ready(1)
	}},
	{name: "error then FunctionCall before Sync", run: func(w *wire, e *frameEnv) {
		w.send(&bm{PreparedStatement: "no such statement"}, &em{},
			&pgproto3.FunctionCall{Function: e.int4pl, Arguments: [][]byte{[]byte("2"), []byte("3")}}, &sm{})
		w.ready(1)
		w.send(&q{String: "SELECT 'after'"})
		w.ready(1)
	}},
	{name: "describe and execute of unknown names", run: func(w *wire, _ *frameEnv) {
		w.send(&dm{ObjectType: 'S', Name: "nope"}, &sm{}, &em{Portal: "nope"}, &sm{}, &dm{ObjectType: 'P', Name: "nope"}, &sm{})
		w.ready(3)
	}},
	{name: "portal suspended and resumed", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "SELECT g FROM generate_series(1, 5) g"}, &bm{}, &dm{ObjectType: 'P'},
			&em{MaxRows: 2}, &em{MaxRows: 2}, &em{MaxRows: 2}, &sm{})
		w.ready(1)
	}},
	{name: "named portal across Syncs in a transaction", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "BEGIN"}, &pm{Name: "s2", Query: "SELECT g FROM generate_series(1, 3) g"},
			&bm{DestinationPortal: "c1", PreparedStatement: "s2"}, &em{Portal: "c1", MaxRows: 1}, &sm{},
			&em{Portal: "c1", MaxRows: 1}, &sm{}, &q{String: "COMMIT"})
		w.ready(4)
	}},
	{name: "Sync only", run: func(w *wire, _ *frameEnv) {
		w.send(&sm{}, &sm{}, &sm{})
		w.ready(3)
	}},
	{name: "Flush, then Sync", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "SELECT 'flushed'"}, &bm{}, &dm{ObjectType: 'P'}, &em{}, &hm{})
		w.until('C', 1)
		w.send(&sm{})
		w.ready(1)
	}},
	{name: "commit fails at Sync (deferred constraint)", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "INSERT INTO d VALUES (1), (1)"}, &bm{}, &em{}, &sm{}, &q{String: "SELECT count(*) FROM d"})
		w.ready(2)
	}},
	{name: "libpq extended COPY FROM STDIN (extra Sync)", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "COPY t (id, v) FROM STDIN"}, &bm{}, &dm{ObjectType: 'P'}, &em{}, &sm{})
		w.until('G', 1)
		w.send(copyData("10\tx\n"), copyData("11\ty\n"), &pgproto3.CopyDone{}, &sm{})
		w.ready(1)
		w.send(&q{String: "SELECT count(*) FROM t"})
		w.ready(1)
	}},
	{name: "extended COPY FROM STDIN sent whole", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "COPY t (id, v) FROM STDIN"}, &bm{}, &em{}, copyData("12\tz\n"), &pgproto3.CopyDone{}, &sm{},
			&q{String: "SELECT count(*) FROM t"})
		w.ready(2)
	}},
	{name: "libpq extended COPY FROM STDIN, bad data", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "COPY t (id, v) FROM STDIN"}, &bm{}, &dm{ObjectType: 'P'}, &em{}, &sm{})
		w.until('G', 1)
		w.send(copyData("bad\n"), copyData("13\tq\n"), &pgproto3.CopyDone{}, &sm{})
		w.ready(1)
		w.send(&q{String: "SELECT count(*) FROM t"})
		w.ready(1)
	}},
	{name: "libpq extended COPY FROM STDIN, bad data, nothing after", ambiguous: true, run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "COPY t (id, v) FROM STDIN"}, &bm{}, &dm{ObjectType: 'P'}, &em{}, &sm{})
		w.until('G', 1)
		w.send(copyData("bad\n"), &pgproto3.CopyDone{}, &sm{})
		w.ready(1)
	}},
	{name: "libpq extended COPY FROM STDIN, CopyFail", run: func(w *wire, _ *frameEnv) {
		w.send(&pm{Query: "COPY t (id, v) FROM STDIN"}, &bm{}, &dm{ObjectType: 'P'}, &em{}, &sm{})
		w.until('G', 1)
		w.send(copyData("14\tq\n"), &pgproto3.CopyFail{Message: "client gave up"}, &sm{})
		w.ready(1)
		w.send(&q{String: "SELECT count(*) FROM t"})
		w.ready(1)
	}},
	{name: "simple COPY FROM STDIN", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "COPY t (id, v) FROM STDIN"})
		w.until('G', 1)
		w.send(copyData("20\ta\n21\tb\n"), copyData("22\tc\n"), &pgproto3.CopyDone{})
		w.ready(1)
	}},
	{name: "simple COPY FROM STDIN, bad data", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "COPY t (id, v) FROM STDIN"})
		w.until('G', 1)
		w.send(copyData("zz\n"), copyData("23\tq\n"), &pgproto3.CopyDone{})
		w.ready(1)
		w.send(&q{String: "SELECT count(*) FROM t"})
		w.ready(1)
	}},
	{name: "simple COPY FROM STDIN, CopyFail", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "COPY t (id, v) FROM STDIN"})
		w.until('G', 1)
		w.send(copyData("24\tq\n"), &pgproto3.CopyFail{Message: "no"})
		w.ready(1)
	}},
	{name: "COPY TO STDOUT, both protocols", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "COPY (SELECT g, repeat('y', g % 50) FROM generate_series(1, 2000) g) TO STDOUT"})
		w.ready(1)
		w.send(&pm{Query: "COPY (SELECT g FROM generate_series(1, 500) g) TO STDOUT (FORMAT binary)"}, &bm{}, &dm{ObjectType: 'P'}, &em{}, &sm{})
		w.ready(1)
	}},
	{name: "FunctionCall", run: func(w *wire, e *frameEnv) {
		w.send(&pgproto3.FunctionCall{Function: e.int4pl, Arguments: [][]byte{[]byte("2"), []byte("3")}},
			&pgproto3.FunctionCall{Function: e.int4div, Arguments: [][]byte{[]byte("1"), []byte("0")}},
			&pgproto3.FunctionCall{Function: e.int4pl, ArgFormatCodes: []uint16{1}, Arguments: [][]byte{{0, 0, 0, 7}, {0, 0, 0, 8}}, ResultFormatCode: 1})
		w.ready(3)
	}},
	{name: "LISTEN and NOTIFY", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "LISTEN ch"}, &q{String: "NOTIFY ch, 'hello'"}, &q{String: "SELECT pg_notify('ch', repeat('p', 7000))"}, &q{String: "UNLISTEN *"})
		w.ready(4)
	}},
	{name: "the backend process ID the client was given", run: func(w *wire, env *frameEnv) {
		// Its own value differs between the two sessions, so it is
		// compared with the BackendKeyData here and not recorded; the
		// NOTIFY the session sends itself is recorded (see normalized).
		w.send(&q{String: "SELECT pg_backend_pid()::text"})
		var pid string
		for f := w.next(); f.typ != 'Z'; f = w.next() {
			if f.typ == 'D' && len(f.body) > 6 {
				pid = string(f.body[6:])
			}
		}
		if want := fmt.Sprint(w.pid); pid != want {
			env.t.Errorf("pg_backend_pid() = %s, BackendKeyData gave the client %s", pid, want)
		}
		w.send(&q{String: "LISTEN me"}, &q{String: "NOTIFY me, 'mine'"}, &q{String: "UNLISTEN *"})
		w.ready(3)
	}},
	{name: "notices and parameter status", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: `DO $$BEGIN RAISE NOTICE 'n1'; RAISE WARNING 'w1' USING DETAIL = 'd', HINT = 'h'; END$$`},
			&q{String: "SET application_name = 'frames'"}, &q{String: "SET DateStyle = 'SQL, DMY'"}, &q{String: "RESET ALL"})
		w.ready(4)
	}},
	{name: "large rows and parameters", run: func(w *wire, e *frameEnv) {
		w.send(&q{String: "SELECT repeat('x', 3000000) AS big, 2 AS small"})
		w.ready(1)
		w.send(&pm{Query: "SELECT length($1::text), md5($1::text)"}, &bm{Parameters: [][]byte{e.bigParam}}, &dm{ObjectType: 'P'}, &em{}, &sm{})
		w.ready(1)
	}},
	{name: "cancel a running query", run: func(w *wire, e *frameEnv) {
		w.send(&q{String: "SELECT pg_sleep(30)"})
		e.waitActive("SELECT pg_sleep(30)")
		w.cancel()
		w.ready(1)
		w.send(&q{String: "SELECT 'still here'"})
		w.ready(1)
	}},
	{name: "fenced writes and refusals on a protected table", fences: 2, run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "BEGIN"}, &pm{Name: "f", Query: "SELECT fencegate.fence($1::text, $2::bigint)"}, &dm{ObjectType: 'S', Name: "f"},
			&bm{PreparedStatement: "f", Parameters: [][]byte{[]byte("order:42"), []byte("5")}}, &em{},
			&pm{Query: "UPDATE orders SET state = 'paid' WHERE id = 42"}, &bm{}, &em{}, &sm{}, &q{String: "COMMIT"})
		w.ready(3)
		w.send(&q{String: "UPDATE orders SET state = 'x' WHERE id = 43"},
			&q{String: "BEGIN; SELECT fencegate.fence('order:42', 4); UPDATE orders SET state = 'stale' WHERE id = 42; COMMIT"},
			&q{String: "ROLLBACK"}, &q{String: "SELECT fencegate.fence_many(ARRAY['order:42', 'order:43'], 5)"})
		w.ready(4)
	}},
	{name: "transaction status across protocols", run: func(w *wire, _ *frameEnv) {
		w.send(&q{String: "BEGIN"}, &pm{Query: "INSERT INTO t VALUES (30, 'a')"}, &bm{}, &em{}, &sm{},
			&pm{Query: "SELECT 1/0"}, &bm{}, &em{}, &sm{}, &q{String: "SELECT 1"}, &q{String: "ROLLBACK"})
		w.ready(5)
	}},
}

// TestFramesMatchDirect runs each sequence straight to PostgreSQL and
// through the proxy, as the same application role on the same database,
// and compares every frame the client receives, byte for byte. After
// each, the proxy's request tracker must see the session idle (or, after
// an exchange the server's answers cannot settle, busy: never idle with a
// request in flight, never lost).
func TestFramesMatchDirect(t *testing.T) {
	fx := newFixture(t)
	execAdmin(t, fx.admin, `CREATE TABLE t (id int, v text);
		CREATE TABLE d (id int UNIQUE DEFERRABLE INITIALLY DEFERRED);
		GRANT SELECT, INSERT, UPDATE, DELETE ON t, d TO `+fx.role)
	env := &frameEnv{t: t, admin: fx.admin, bigParam: bytes.Repeat([]byte("0123456789"), 100_000)}
	ac := connect(t, fx.admin)
	if err := ac.QueryRow(context.Background(), "SELECT 'int4pl'::regproc::oid, 'int4div'::regproc::oid").Scan(&env.int4pl, &env.int4div); err != nil {
		t.Fatal(err)
	}
	for _, sq := range sequences {
		t.Run(sq.name, func(t *testing.T) {
			env.t = t
			var got [2][]frame
			fences := testutilCounter(fx.p.Metrics().FencesAccepted)
			for i, dsn := range []string{fx.direct, fx.proxied} {
				execAdmin(t, fx.admin, "TRUNCATE t, d")
				w := dialWire(t, dsn)
				sq.run(w, env)
				got[i] = w.normalized()
				if i == 1 {
					states := fx.p.SessionStates()
					want := "idle"
					if sq.ambiguous {
						want = "busy"
					}
					if len(states) != 1 || states[0] != want {
						t.Errorf("proxy's tracker after the exchange: %v, want [%s]", states, want)
					}
				}
				w.send(&pgproto3.Terminate{})
				w.c.Close()
				testutil.WaitFor(t, 10*time.Second, "the proxy session to end", func() error {
					if n := len(fx.p.SessionStates()); n != 0 {
						return fmt.Errorf("%d sessions open", n)
					}
					return nil
				})
			}
			if n := testutilCounter(fx.p.Metrics().FencesAccepted) - fences; n != sq.fences {
				t.Errorf("fences accepted: %v, want %v", n, sq.fences)
			}
			direct, proxied := got[0], got[1]
			for i := range max(len(direct), len(proxied)) {
				var d, p frame
				if i < len(direct) {
					d = direct[i]
				}
				if i < len(proxied) {
					p = proxied[i]
				}
				if d.typ != p.typ || !bytes.Equal(d.body, p.body) {
					t.Fatalf("frame %d differs:\n direct:  %v\n proxied: %v\n(direct %d frames, proxied %d)", i, d, p, len(direct), len(proxied))
				}
			}
			t.Logf("%d frames identical", len(direct))
		})
	}
}
