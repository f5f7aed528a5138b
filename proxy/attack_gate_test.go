package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Attacks on the gate: a StartupMessage read one way by the proxy and
// another by the server, roles that read or copy what the fence rests on,
// and a backend process ID the client cannot act on.

// startupPacket encodes a protocol 3.0 StartupMessage with the keys and
// values of kv in their order, repeats included (pgproto3 takes a map).
func startupPacket(kv ...string) []byte {
	b := make([]byte, 8, 128)
	binary.BigEndian.PutUint32(b[4:], pgproto3.ProtocolVersionNumber)
	for _, s := range kv {
		b = append(append(b, s...), 0)
	}
	b = append(b, 0)
	binary.BigEndian.PutUint32(b, uint32(len(b)))
	return b
}

// rawStart sends a StartupMessage of kv to the server of dsn (trust
// authentication) and reads up to the first ErrorResponse or
// ReadyForQuery, which it returns.
func rawStart(t *testing.T, dsn string, kv ...string) (*wire, frame) {
	t.Helper()
	c := rawConn(t, dsn)
	w := &wire{t: t, addr: mustURL(t, dsn).Host, c: c, r: bufio.NewReader(c)}
	if _, err := c.Write(startupPacket(kv...)); err != nil {
		t.Fatal(err)
	}
	for {
		f := w.next()
		switch f.typ {
		case 'K':
			w.pid, w.secret = binary.BigEndian.Uint32(f.body), f.body[4:]
		case 'E', 'Z':
			return w, f
		}
	}
}

// errorOf decodes an ErrorResponse frame.
func errorOf(t *testing.T, f frame) *pgproto3.ErrorResponse {
	t.Helper()
	var e pgproto3.ErrorResponse
	if err := e.Decode(f.body); err != nil {
		t.Fatalf("decode %v: %v", f, err)
	}
	return &e
}

// mark reads the mark of resource and the state of order 42.
func markAndState(t *testing.T, admin, resource string) (int64, string) {
	t.Helper()
	var tok int64
	var st string
	err := connect(t, admin).QueryRow(context.Background(),
		"SELECT (SELECT token FROM fencegate.marks WHERE resource = $1), (SELECT state FROM orders WHERE id = 42)", resource).Scan(&tok, &st)
	if err != nil {
		t.Fatal(err)
	}
	return tok, st
}

// TestGateRefusesRepeatedStartupKeys: PostgreSQL takes the last of a
// repeated startup key, the proxy used to take the first. One honest
// session of the application role, then, within CheckInterval, a
// StartupMessage "user=app ... user=postgres" reached the server as
// postgres with the application role's cached verdict, lowered a mark and
// committed an unfenced write. Now every repeated key is refused, naming
// it, before anything reaches the server; the mark and the row stay.
func TestGateRefusesRepeatedStartupKeys(t *testing.T) {
	fx := newFixture(t, proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = time.Hour }))
	execAdmin(t, fx.admin, "SELECT fencegate.set_mark('order:42', 50, 'attack suite')")
	db := strings.TrimPrefix(mustURL(t, fx.direct).Path, "/")
	repl := pgfencetest.Role(t, fx.admin, "fg_repl_", "LOGIN REPLICATION")
	admitted(t, fx.proxied) // the honest session whose verdict is cached

	for _, tc := range []struct {
		name, key string
		kv        []string
	}{
		{"user: the application role, then a superuser", "user", []string{"user", fx.role, "database", db, "user", "postgres"}},
		{"database", "database", []string{"user", fx.role, "database", db, "database", "postgres"}},
		{"options", "options", []string{"user", fx.role, "database", db, "options", "-c role=" + fx.role, "options", "-c search_path=evil"}},
		{"replication: off, then database", "replication", []string{"user", repl, "database", db, "replication", "off", "replication", "database"}},
		{"a setting", "application_name", []string{"user", fx.role, "database", db, "application_name", "a", "application_name", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, f := rawStart(t, fx.proxied, tc.kv...)
			if f.typ == 'Z' {
				// Admitted: show what such a session can do.
				w.send(&q{String: "SELECT fencegate.set_mark('order:42', 1, 'forged')"},
					&q{String: "BEGIN; SELECT fencegate.fence('order:42', 2); UPDATE orders SET state = 'forged' WHERE id = 42; COMMIT"})
				w.ready(2)
				t.Fatalf("StartupMessage %q admitted; it then got %v", tc.kv, w.got)
			}
			e := errorOf(t, f)
			if e.Code != proxy.CodeProtocolViolation || !strings.Contains(e.Message, `"`+tc.key+`" is given twice`) {
				t.Fatalf("StartupMessage %q: %s %s, want %s naming %q", tc.kv, e.Code, e.Message, proxy.CodeProtocolViolation, tc.key)
			}
			if strings.Contains(e.Message, "\n") {
				t.Errorf("message %q is not one line", e.Message)
			}
		})
	}
	if tok, st := markAndState(t, fx.admin, "order:42"); tok != 50 || st != "new" {
		t.Fatalf("after the attacks: mark %d, state %q; want 50 and \"new\"", tok, st)
	}
}

// TestGateReadsReplicationAsTheServerDoes sends the same StartupMessage,
// with a replication value from a list of spellings, straight to
// PostgreSQL and through the proxy, as a role without REPLICATION.
// PostgreSQL makes the session a walsender (and refuses this role), an
// ordinary session, or refuses the value; the proxy must admit exactly the
// ordinary sessions and refuse the rest, walsenders with 0A000.
func TestGateReadsReplicationAsTheServerDoes(t *testing.T) {
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN)
	name := strings.TrimPrefix(mustURL(t, db.AppDSN).Path, "/")
	for _, v := range []string{
		"true", "on", "yes", "1", "database", "t", "TRUE", "Tr", "y", "YE", "On",
		"false", "off", "no", "0", "f", "fAlSe", "FAL", "of", "OFF", "n", "NO",
		"", " off", "off ", "o", "00", "01", "database ", "Database", "truex", "offf", "2", "nope",
	} {
		_, direct := rawStart(t, db.AppDSN, "user", db.App, "database", name, "replication", v)
		_, through := rawStart(t, proxied, "user", db.App, "database", name, "replication", v)
		ordinary := direct.typ == 'Z'
		switch {
		case ordinary && through.typ != 'Z':
			t.Errorf("replication=%q: PostgreSQL opens an ordinary session, the proxy refuses it: %s", v, errorOf(t, through).Message)
		case !ordinary && through.typ == 'Z':
			t.Errorf("replication=%q: PostgreSQL refuses (%s), the proxy admits it", v, errorOf(t, direct).Message)
		case !ordinary:
			if d := errorOf(t, direct); strings.Contains(d.Message, "walsender") {
				if e := errorOf(t, through); e.Code != "0A000" || !strings.Contains(e.Message, "replication") {
					t.Errorf("replication=%q (a walsender): the proxy says %s %s, want 0A000", v, e.Code, e.Message)
				}
			}
		}
	}
}

// TestGateRefusesReplicationRoles: a role with REPLICATION, or a member of
// one, is refused with FG007 (over a replication connection straight to
// the server it can copy signing_keys with BASE_BACKUP; after SET ROLE,
// logical decoding shows every change, the keys of the next
// require-signed included); so are readers of every table or of the
// server's files, keys installed or not.
func TestGateRefusesReplicationRoles(t *testing.T) {
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN)
	repl := pgfencetest.Role(t, db.DSN, "fg_repl_", "LOGIN REPLICATION")
	group := pgfencetest.Role(t, db.DSN, "fg_replg_", "NOLOGIN REPLICATION")
	member := pgfencetest.Role(t, db.DSN, "fg_replm_", "LOGIN NOINHERIT")
	reader := pgfencetest.Role(t, db.DSN, "fg_reader_", "LOGIN")
	files := pgfencetest.Role(t, db.DSN, "fg_files_", "LOGIN")
	su := pgfencetest.Role(t, db.DSN, "fg_su_", "NOLOGIN SUPERUSER")
	suMember := pgfencetest.Role(t, db.DSN, "fg_sum_", "LOGIN")
	execAdmin(t, db.DSN, "GRANT "+group+" TO "+member+"; GRANT pg_read_all_data TO "+reader+
		"; GRANT pg_read_server_files TO "+files+"; GRANT "+su+" TO "+suMember)
	for _, tc := range []struct{ name, user, says string }{
		{"REPLICATION", repl, "has REPLICATION"},
		{"member of a REPLICATION role", member, "which has REPLICATION"},
		{"pg_read_all_data", reader, "pg_read_all_data, which can read the signing keys"},
		{"pg_read_server_files", files, "pg_read_server_files, which can read the signing keys"},
		{"member of a superuser role", suMember, "which is a superuser"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe := refusedWith(t, asUser(t, proxied, tc.user, ""), fencegate.CodePrivilegedRole)
			if !strings.Contains(pe.Message, tc.says) {
				t.Errorf("message %q does not say %q", pe.Message, tc.says)
			}
		})
	}
	// A replication connection of the REPLICATION role, physical or
	// logical, never reaches the server.
	for _, mode := range []string{"true", "database"} {
		refusedWith(t, withParams(asUser(t, proxied, repl, ""), "replication="+mode), "0A000")
	}
}

// TestClientSeesTheBackendPID: the process ID the client receives is its
// backend's, so pg_backend_pid() agrees with it, and pg_cancel_backend
// from another session and a client's CancelRequest (pgx sends one when
// the context ends) both cancel the right backend's query and no other.
// A CancelRequest with the right process ID and a wrong secret is
// ignored.
func TestClientSeesTheBackendPID(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	a, b := connect(t, fx.proxied), connect(t, fx.proxied)
	for _, c := range []*pgx.Conn{a, b} {
		var pid uint32
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if seen := c.PgConn().PID(); seen != pid {
			t.Fatalf("the client was given process ID %d; pg_backend_pid() = %d", seen, pid)
		}
	}
	admin := connect(t, fx.admin)
	sleeping := func(c *pgx.Conn) func() error {
		return func() error {
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%'",
				int32(c.PgConn().PID())).Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return errors.New("not sleeping yet")
			}
			return nil
		}
	}
	// Each sleeps until cancelled; each result tells which was.
	sleep := func(c *pgx.Conn) chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, "SELECT pg_sleep(60)")
			done <- err
		}()
		testutil.WaitFor(t, 10*time.Second, "the query to run", sleeping(c))
		return done
	}
	stillRunning := func(done chan error, who string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s's query ended: %v", who, err)
		default:
		}
	}
	cancelled := func(done chan error, who string) {
		t.Helper()
		select {
		case err := <-done:
			if got := sqlstate(err); got != "57014" {
				t.Fatalf("%s's query: %v, want SQLSTATE 57014", who, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s's query was not cancelled", who)
		}
	}

	// pg_cancel_backend with the process ID the client was given.
	doneA, doneB := sleep(a), sleep(b)
	var ok bool
	if err := admin.QueryRow(ctx, "SELECT pg_cancel_backend($1)", int32(a.PgConn().PID())).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_cancel_backend(the PID a's client was given) = %v, %v", ok, err)
	}
	cancelled(doneA, "a")
	stillRunning(doneB, "b")

	// A CancelRequest for b's process ID with a wrong secret: ignored.
	w := &wire{t: t, addr: mustURL(t, fx.proxied).Host, pid: b.PgConn().PID(), secret: []byte{1, 2, 3, 4}}
	w.cancel()
	if err := sleeping(b)(); err != nil {
		t.Fatalf("b after a CancelRequest with a wrong secret: %v", err)
	}
	stillRunning(doneB, "b")

	// The client's own CancelRequest, through the proxy, for a.
	doneA = sleep(a)
	if err := a.PgConn().CancelRequest(ctx); err != nil {
		t.Fatalf("a's CancelRequest: %v", err)
	}
	cancelled(doneA, "a")
	stillRunning(doneB, "b")
	if err := admin.QueryRow(ctx, "SELECT pg_cancel_backend($1)", int32(b.PgConn().PID())).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_cancel_backend(b) = %v, %v", ok, err)
	}
	cancelled(doneB, "b")
}

// TestGateClosesStalledHolders: with Config.IdleInTransactionTimeout, a
// session that holds a fence and then stays idle in its transaction is
// closed, whatever it SET (idle_in_transaction_session_timeout = 0 turns
// the server's own limit off): its fence's lock is released, its write
// never commits, and its client gets FATAL 25P03 at its next statement. A
// session idle outside a transaction, for as long, and one whose
// transaction is running a statement, stay open.
func TestGateClosesStalledHolders(t *testing.T) {
	fx := newFixture(t, proxytest.WithConfig(func(c *proxy.Config) { c.IdleInTransactionTimeout = 300 * time.Millisecond }))
	ctx := context.Background()
	execAdmin(t, fx.admin, "SELECT fencegate.set_mark('order:42', 50, 'attack suite')")
	idle := connect(t, fx.proxied) // idle outside a transaction throughout
	busy := connect(t, fx.proxied)
	busyDone := make(chan error, 1)
	go func() {
		_, err := busy.Exec(ctx, "BEGIN; SELECT pg_sleep(3); COMMIT")
		busyDone <- err
	}()

	stalled := connect(t, fx.proxied)
	if _, err := stalled.Exec(ctx, "SET idle_in_transaction_session_timeout = 0"); err != nil {
		t.Fatal(err)
	}
	tx, err := stalled.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", int64(60)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'stalled' WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	pid := int32(stalled.PgConn().PID())
	admin := connect(t, fx.admin)
	testutil.WaitFor(t, 30*time.Second, "the stalled session's backend to end", func() error {
		var n int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return errors.New("still there")
		}
		return nil
	})
	err = tx.Commit(ctx)
	if got := sqlstate(err); got != "25P03" {
		t.Errorf("the stalled session's COMMIT: %v, want SQLSTATE 25P03", err)
	}
	if tok, st := markAndState(t, fx.admin, "order:42"); tok != 50 || st != "new" {
		t.Fatalf("after the stalled holder was closed: mark %d, state %q; want 50 and \"new\"", tok, st)
	}
	// Its fence's lock is gone: the next holder fences and writes at once.
	fencedExec(t, fx.proxied, "order:42", 61, "UPDATE orders SET state = 'next' WHERE id = 42")

	if err := <-busyDone; err != nil {
		t.Errorf("a transaction running a statement past the limit: %v", err)
	}
	var one int
	if err := idle.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Errorf("a session idle outside a transaction: %v", err)
	}
}

// stripSessionAuthorization starts a relay on 127.0.0.1:0 in front of the
// server at addr that drops the server's session_authorization
// ParameterStatus (as a pooler that does not pass it on would) and
// forwards everything else; it returns the relay's address.
func stripSessionAuthorization(t *testing.T, addr string) string {
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
			go relayStripping(c, addr)
		}
	}()
	return ln.Addr().String()
}

// relayStripping relays one connection for stripSessionAuthorization.
func relayStripping(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer up.Close()
	// The first packet says whether this is a session (a StartupMessage:
	// typed frames come back) or something else (an SSLRequest or a
	// CancelRequest: relayed as it is).
	var first [8]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return
	}
	if _, err := up.Write(first[:]); err != nil {
		return
	}
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	if binary.BigEndian.Uint32(first[4:]) != pgproto3.ProtocolVersionNumber {
		_, _ = io.Copy(c, up)
		return
	}
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
		if h[0] == 'S' && bytes.HasPrefix(body, []byte("session_authorization\x00")) {
			continue
		}
		if _, err := c.Write(append(h[:], body...)); err != nil {
			return
		}
	}
}

// TestGateCachesOnlyTheServersRole: the role verdict is cached under the
// role the server reported; an upstream that reports none gets the role
// check at every session, so a privilege granted after a session was
// admitted is seen by the next one, within CheckInterval too.
func TestGateCachesOnlyTheServersRole(t *testing.T) {
	fx := newFixture(t)
	relay := stripSessionAuthorization(t, mustURL(t, fx.direct).Host)
	proxied := proxytest.Start(t, withHost(t, fx.direct, "postgres://"+relay),
		proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = time.Hour }))
	admitted(t, proxied)
	execAdmin(t, fx.admin, "GRANT pg_execute_server_program TO "+fx.role)
	refusedWith(t, proxied, fencegate.CodePrivilegedRole)
}

// TestGateTimesAPipelinedHolder: a client that pipelines more requests
// than the request tracker holds (2^18 small ones, behind a slow query, in
// a transaction holding a fence) used to make the tracker give up on its
// session, and an untracked session was never closed by
// IdleInTransactionTimeout: it then sat idle in its fenced transaction
// for good. The proxy now stops reading from such a client until the
// server has answered; the session stays tracked, and once idle in its
// transaction it is closed like any other.
func TestGateTimesAPipelinedHolder(t *testing.T) {
	fx := newFixture(t, proxytest.WithConfig(func(c *proxy.Config) { c.IdleInTransactionTimeout = 300 * time.Millisecond }))
	ctx := context.Background()
	w := dialWire(t, fx.proxied)
	_ = w.c.SetDeadline(time.Now().Add(2 * time.Minute))
	w.send(&pgproto3.Query{String: "SET idle_in_transaction_session_timeout = 0; BEGIN; SELECT fencegate.fence('order:42', 70)"})
	w.ready(1)
	for _, f := range w.got {
		if f.typ == 'E' {
			t.Fatalf("fence: %s", errorOf(t, f).Message)
		}
	}
	const n = 1<<18 + 4096
	answered := make(chan error, 1)
	go func() {
		// Read while the pipeline is written, as a client must.
		closes := 0
		for closes < n {
			var h [5]byte
			if _, err := io.ReadFull(w.r, h[:]); err != nil {
				answered <- fmt.Errorf("after %d CloseComplete: %w", closes, err)
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
			if _, err := io.ReadFull(w.r, body); err != nil {
				answered <- err
				return
			}
			switch h[0] {
			case '3':
				closes++
			case 'E':
				answered <- fmt.Errorf("error in the pipeline: %q", body)
				return
			}
		}
		for {
			f := w.next()
			if f.typ == 'Z' {
				if f.body[0] != 'T' {
					answered <- fmt.Errorf("status after the pipeline: %q", f.body)
				}
				break
			}
		}
		answered <- nil
	}()
	var b []byte
	b, _ = (&pgproto3.Parse{Query: "SELECT pg_sleep(0.5)"}).Encode(b)
	b, _ = (&pgproto3.Bind{}).Encode(b)
	b, _ = (&pgproto3.Execute{}).Encode(b)
	closeMsg, _ := (&pgproto3.Close{ObjectType: 'S', Name: "x"}).Encode(nil)
	for range n {
		b = append(b, closeMsg...)
	}
	b, _ = (&pgproto3.Sync{}).Encode(b)
	if _, err := w.c.Write(b); err != nil {
		t.Fatalf("write the pipeline: %v", err)
	}
	if err := <-answered; err != nil {
		t.Fatal(err)
	}
	// Now idle in the fenced transaction: the proxy's limit ends it.
	pid := int32(w.pid)
	admin := connect(t, fx.admin)
	testutil.WaitFor(t, 30*time.Second, "the pipelined holder's backend to end", func() error {
		var alive int
		if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&alive); err != nil {
			return err
		}
		if alive != 0 {
			return errors.New("still there, idle in its transaction")
		}
		return nil
	})
	fencedExec(t, fx.proxied, "order:42", 71, "UPDATE orders SET state = 'next' WHERE id = 42")
}
