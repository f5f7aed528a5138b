package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// asUser returns dsn with its user replaced, and extra URL parameters.
func asUser(t testing.TB, dsn, user, params string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	s := u.String()
	if params != "" {
		s = withParams(s, params)
	}
	return s
}

// refusedWith connects to dsn and returns the error, which must carry
// SQLSTATE code.
func refusedWith(t *testing.T, dsn, code string) *pgconn.PgError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err == nil {
		c.Close(ctx)
		t.Fatalf("connect %s: admitted, want SQLSTATE %s", dsn, code)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("connect %s: %v, want SQLSTATE %s", dsn, err, code)
	}
	if pe.Severity != "FATAL" {
		t.Errorf("severity %q, want FATAL", pe.Severity)
	}
	return pe
}

// admitted connects to dsn and runs a query.
func admitted(t *testing.T, dsn string) {
	t.Helper()
	c := connect(t, dsn)
	var one int
	if err := c.QueryRow(context.Background(), "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("query through an admitted session: %v", err)
	}
}

// TestGateRefusesPrivilegedRoles connects through the proxy as each kind
// of role that could switch enforcement off: each is refused at startup
// with FG007 and a message that says why and what to do; the application
// role is admitted; with AllowPrivilegedRoles every one is.
func TestGateRefusesPrivilegedRoles(t *testing.T) {
	db := pgfencetest.New(t)
	tableOwner := pgfencetest.Role(t, db.DSN, "fg_towner_", "LOGIN")
	member := pgfencetest.Role(t, db.DSN, "fg_member_", "LOGIN NOINHERIT")
	nested := pgfencetest.Role(t, db.DSN, "fg_nested_", "LOGIN")
	fgMember := pgfencetest.Role(t, db.DSN, "fg_fgmember_", "LOGIN NOINHERIT")
	creator := pgfencetest.Role(t, db.DSN, "fg_creator_", "LOGIN CREATEROLE")
	programs := pgfencetest.Role(t, db.DSN, "fg_prog_", "LOGIN")
	schemaOwner := pgfencetest.Role(t, db.DSN, "fg_sowner_", "LOGIN")
	execAdmin(t, db.DSN, `CREATE TABLE orders (id int PRIMARY KEY, state text);
		ALTER TABLE orders OWNER TO `+tableOwner+`;
		GRANT `+tableOwner+` TO `+member+`;
		GRANT `+member+` TO `+nested+`;
		GRANT `+db.Owner+` TO `+fgMember+`;
		GRANT pg_execute_server_program TO `+programs+`;
		CREATE SCHEMA shop AUTHORIZATION `+schemaOwner+`;
		CREATE TABLE shop.lines (id int);
		GRANT SELECT ON orders TO `+db.App)
	protect(t, db.DSN, "orders", `'order:' || id`)
	protect(t, db.DSN, "shop.lines", `'line'`)
	proxied := proxytest.Start(t, db.AppDSN)

	for _, tc := range []struct {
		name, user, params string
		says               []string
	}{
		{"superuser", "postgres", "", []string{"postgres is a superuser"}},
		{"owner of a protected table", tableOwner, "", []string{tableOwner, "protected table public.orders"}},
		{"member (NOINHERIT) of the table's owner", member, "", []string{member, "is a member of " + tableOwner}},
		{"member of a member", nested, "", []string{nested, "is a member of " + tableOwner}},
		{"member of the fencegate owner", fgMember, "", []string{fgMember, "schema fencegate"}},
		{"CREATEROLE", creator, "", []string{creator, "CREATEROLE"}},
		{"pg_execute_server_program", programs, "", []string{programs, "run programs"}},
		{"owner of a protected table's schema", schemaOwner, "", []string{schemaOwner, "shop"}},
		// Nothing the client sets at startup changes the gate's verdict.
		{"member, becoming the owner at startup", member, "options=-c%20role%3D" + tableOwner, []string{member}},
		{"superuser with a search_path of its own", "postgres", "options=-c%20search_path%3Devil,pg_catalog", []string{"superuser"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pe := refusedWith(t, asUser(t, proxied, tc.user, tc.params), fencegate.CodePrivilegedRole)
			for _, s := range tc.says {
				if !strings.Contains(pe.Message, s) {
					t.Errorf("message %q does not say %q", pe.Message, s)
				}
			}
			if !strings.Contains(pe.Hint, "application role") || !strings.Contains(pe.Hint, "--allow-privileged-roles") {
				t.Errorf("hint %q does not say how to fix it", pe.Hint)
			}
		})
	}
	t.Run("application role", func(t *testing.T) { admitted(t, proxied) })
	t.Run("psql shows the refusal", func(t *testing.T) {
		out, ok := psql(t, asUser(t, proxied, "postgres", ""), "SELECT 1;\n")
		if ok || !strings.Contains(out, "admits application roles only") || !strings.Contains(out, "--allow-privileged-roles") {
			t.Fatalf("psql as superuser: ok=%v\n%s", ok, out)
		}
	})
	t.Run("AllowPrivilegedRoles", func(t *testing.T) {
		open := proxytest.Start(t, db.AppDSN, proxytest.AllowPrivilegedRoles())
		for _, user := range []string{"postgres", tableOwner, fgMember, creator} {
			admitted(t, asUser(t, open, user, ""))
		}
	})
}

// TestGateRunsUnderItsOwnTimeouts opens a session whose startup options
// set short timeouts and a search_path with nothing in it, while the gate's
// query waits on a catalog lock for much longer than those timeouts: the
// gate runs under its own, waits, and admits the session, and the session
// then has exactly the settings it asked for.
func TestGateRunsUnderItsOwnTimeouts(t *testing.T) {
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN, everySession)
	const clientTimeout = 500 * time.Millisecond
	ctx := context.Background()
	tx := lockGateCatalog(t, db.DSN)
	type opened struct {
		c   *pgx.Conn
		err error
	}
	done := make(chan opened, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, withParams(proxied, "options=-c%20statement_timeout%3D500ms%20-c%20lock_timeout%3D500ms%20-c%20search_path%3Dnowhere"))
		done <- opened{c, err}
	}()
	// The gate waits on the lock for twice the client's timeouts, which
	// would have cancelled its query had it run under them.
	testutil.WaitFor(t, 10*time.Second, "the gate to wait for the lock", waitingOnLock(t, db.DSN, 1))
	time.Sleep(2 * clientTimeout)
	select {
	case o := <-done:
		t.Fatalf("the session finished its startup while the gate's query could not have run: %v", o.err)
	default:
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	o := <-done
	if o.err != nil {
		t.Fatalf("connect with short timeouts in the startup options: %v", o.err)
	}
	defer o.c.Close(ctx)
	for name, want := range map[string]string{"statement_timeout": "500ms", "lock_timeout": "500ms", "search_path": "nowhere"} {
		var got string
		if err := o.c.QueryRow(ctx, "SHOW "+name).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("after the gate, %s = %q, want the client's %q", name, got, want)
		}
	}
}

// A privileged role that plants look-alikes of the catalog's operators in
// a schema of its own and puts that schema first in search_path still
// gets refused: the gate pins search_path to pg_catalog for its query.
func TestGateIgnoresTheClientsSearchPath(t *testing.T) {
	db := pgfencetest.New(t)
	owner := pgfencetest.Role(t, db.DSN, "fg_towner_", "LOGIN")
	execAdmin(t, db.DSN, `CREATE TABLE orders (id int PRIMARY KEY);
		ALTER TABLE orders OWNER TO `+owner+`;
		GRANT CREATE ON DATABASE `+strings.TrimPrefix(mustURL(t, db.DSN).Path, "/")+` TO `+owner)
	protect(t, db.DSN, "orders", `'order:' || id`)
	// name = name, as the role check compares role names: false when the
	// right side is the session's role, right everywhere else.
	c := connect(t, asUser(t, db.DSN, owner, ""))
	if _, err := c.Exec(context.Background(), `CREATE SCHEMA evil;
		CREATE FUNCTION evil.eq(a name, b name) RETURNS bool LANGUAGE sql STABLE
			AS 'SELECT a::text OPERATOR(pg_catalog.=) b::text AND b OPERATOR(pg_catalog.<>) session_user';
		CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.eq)`); err != nil {
		t.Fatal(err)
	}
	// Straight to PostgreSQL, under that search_path, the role check's
	// query finds no reason at all, and the schema check no problem.
	ev := connect(t, asUser(t, db.DSN, owner, "options=-c%20search_path%3Devil,pg_catalog"))
	var reasons, problems int
	if err := ev.QueryRow(context.Background(), "SELECT count(*) FROM ("+pgfence.PrivilegeQuery+") r").Scan(&reasons); err != nil {
		t.Fatal(err)
	}
	if err := ev.QueryRow(context.Background(), "SELECT count(*) FROM ("+pgfence.HealthQuery+") r").Scan(&problems); err != nil {
		t.Fatal(err)
	}
	t.Logf("under the planted operator: %d reasons, %d schema problems", reasons, problems)
	proxied := proxytest.Start(t, db.AppDSN)
	refusedWith(t, asUser(t, proxied, owner, "options=-c%20search_path%3Devil,pg_catalog"), fencegate.CodePrivilegedRole)
}

func mustURL(t testing.TB, dsn string) *url.URL {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// lockGateCatalog takes a lock the gate's query waits for (on a catalog
// table of dsn's database) in a transaction the test commits to release
// it; it is rolled back at the end of the test.
func lockGateCatalog(t *testing.T, dsn string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := connect(t, dsn).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "LOCK TABLE pg_catalog.pg_event_trigger IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	return tx
}

// TestGateCheckFailsClosed makes the gate's own query fail (it waits for
// a catalog lock, and the client cancels it): the session is refused, not
// admitted unchecked.
func TestGateCheckFailsClosed(t *testing.T) {
	db := pgfencetest.New(t)
	p := proxytest.Start(t, db.AppDSN)
	lockGateCatalog(t, db.DSN)
	w := dialStartup(t, p)
	testutil.WaitFor(t, 10*time.Second, "the gate to wait for the lock", waitingOnLock(t, db.DSN, 1))
	w.cancel()
	f := w.next()
	if f.typ != 'E' || !strings.Contains(string(f.body), "C57014\x00") || !strings.Contains(string(f.body), "could not check") {
		t.Fatalf("the session whose check failed got %v, want FATAL 57014 from the gate", f)
	}
}

// dialStartup connects a raw client to the proxy and sends the startup,
// reading up to the BackendKeyData, not to ReadyForQuery.
func dialStartup(t *testing.T, dsn string) *wire {
	t.Helper()
	u := mustURL(t, dsn)
	w := &wire{t: t, addr: u.Host}
	c := rawConn(t, dsn)
	w.c, w.r = c, bufio.NewReader(c)
	w.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: map[string]string{
		"user": u.User.Username(), "database": strings.TrimPrefix(u.Path, "/"),
	}})
	for {
		f := w.next()
		if f.typ == 'K' {
			w.pid, w.secret = uint32(f.body[0])<<24|uint32(f.body[1])<<16|uint32(f.body[2])<<8|uint32(f.body[3]), f.body[4:]
			return w
		}
		if f.typ == 'E' || f.typ == 'Z' {
			t.Fatalf("startup: %v before BackendKeyData", f)
		}
	}
}

// TestGateNoticesSchemaChanges drops and alters the schema under a running
// proxy: the next session is refused with FG005 and the repairing command,
// until an administrator repairs it; no restart.
func TestGateNoticesSchemaChanges(t *testing.T) {
	fx := newFixture(t, everySession)
	admitted(t, fx.proxied)
	for _, tc := range []struct {
		name, damage, says string
	}{
		{"function replaced", `CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint
			LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT token'`, "fencegate schema upgrade"},
		{"overload added", `CREATE FUNCTION fencegate.fence(resource text, token integer) RETURNS bigint
			LANGUAGE sql AS 'SELECT token::bigint'`, "is not part of schema fencegate"},
		{"check disabled", `ALTER TABLE orders DISABLE TRIGGER USER`, "no working fencegate check"},
		{"grant widened", `GRANT INSERT ON fencegate.marks TO ` + fx.role, "fencegate schema upgrade"},
		{"schema dropped", `DROP SCHEMA fencegate CASCADE`, "fencegate schema install"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			execAdmin(t, fx.admin, tc.damage)
			pe := refusedWith(t, fx.proxied, fencegate.CodeSchemaInvalid)
			if !strings.Contains(pe.Message, tc.says) {
				t.Errorf("message %q does not say %q", pe.Message, tc.says)
			}
			installSchema(t, fx.db)
			if tc.name == "schema dropped" {
				protect(t, fx.admin, "orders", `'order:' || id`)
			}
			admitted(t, fx.proxied)
		})
	}
}

// everySession makes the proxy check the schema at every session.
var everySession = proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = -1 })

// A passed check is trusted for Config.CheckInterval: within it, sessions
// of the same database skip the schema check, and sessions of a role
// admitted to it skip the role check; another role is checked, a refusal
// is never trusted, and with a negative interval every session is checked.
func TestGateCheckInterval(t *testing.T) {
	fx := newFixture(t, proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = time.Hour }))
	other := pgfencetest.Role(t, fx.admin, "fg_other_", "LOGIN")
	admitted(t, fx.proxied)
	execAdmin(t, fx.admin, "ALTER TABLE orders DISABLE TRIGGER USER; GRANT pg_execute_server_program TO "+fx.role+", "+other)
	admitted(t, fx.proxied) // both verdicts trusted for an hour
	refusedWith(t, asUser(t, fx.proxied, other, ""), fencegate.CodePrivilegedRole)
	refusedWith(t, asUser(t, fx.proxied, other, ""), fencegate.CodePrivilegedRole)
	strict := proxytest.Start(t, fx.direct, everySession)
	refusedWith(t, strict, fencegate.CodeSchemaInvalid)
	installSchema(t, fx.db) // restores the checks
	refusedWith(t, strict, fencegate.CodePrivilegedRole)
}

// Replication connections (a walsender's protocol, physical or logical)
// are refused before they reach PostgreSQL, with a clear message.
func TestReplicationConnectionsRefused(t *testing.T) {
	db := pgfencetest.New(t)
	proxied := proxytest.Start(t, db.AppDSN)
	for _, mode := range []string{"true", "database"} {
		pe := refusedWith(t, withParams(proxied, "replication="+mode), "0A000")
		if !strings.Contains(pe.Message, "replication") {
			t.Errorf("replication=%s: %q", mode, pe.Message)
		}
	}
	admitted(t, withParams(proxied, "replication=false"))
}
