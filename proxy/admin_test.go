package proxy_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
	"log/slog"
)

// logBuffer collects a proxy's log lines for a test to read.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// withAdmin configures the proxy's admin connection (a superuser's DSN to
// any database of the server), the owner role for fresh installs, and a
// log buffer.
func withAdmin(admin, owner string, logs *logBuffer) proxytest.Option {
	return proxytest.WithConfig(func(c *proxy.Config) {
		c.AdminUpstream = admin
		c.SchemaOwnerRole = owner
		c.CheckInterval = -1
		if logs != nil {
			c.Logger = slog.New(slog.NewTextHandler(logs, nil))
		}
	})
}

// With an admin connection the proxy installs the schema in a database
// that has none, and repairs an altered one, when a session finds it so,
// as the admin role, without a restart; sessions are admitted after.
func TestAdminInstallsAndRepairs(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	var logs logBuffer
	proxied, p := proxytest.StartProxy(t, db.AppDSN, withAdmin(db.DSN, db.Owner, &logs))
	admitted(t, proxied)
	c := connect(t, db.DSN)
	var owner string
	if err := c.QueryRow(context.Background(), "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'fencegate'").Scan(&owner); err != nil || owner != db.Owner {
		t.Fatalf("schema fencegate owner = %q, %v; want %s (installed by the proxy)", owner, err, db.Owner)
	}
	// An administrator grants the application role, then breaks the fence.
	if _, err := pgfence.Install(context.Background(), c, pgfence.InstallOptions{OwnerRole: db.Owner, Grant: []string{db.App}}); err != nil {
		t.Fatal(err)
	}
	execAdmin(t, db.DSN, `CREATE OR REPLACE FUNCTION fencegate.fence(resource text, token bigint) RETURNS bigint
		LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT token'`)
	app := connect(t, proxied)
	var tok int64
	if err := pgx.BeginFunc(context.Background(), app, func(tx pgx.Tx) error {
		return tx.QueryRow(context.Background(), fencegate.FenceSQL, "r", 3).Scan(&tok)
	}); err != nil || tok != 3 {
		t.Fatalf("fence through the repaired schema: %d, %v", tok, err)
	}
	if got := testutilCounter(p.Metrics().SchemaRepairs); got != 2 {
		t.Errorf("schema repairs = %v, want 2 (the install, the repair)", got)
	}
	var body string
	if err := c.QueryRow(context.Background(), "SELECT prosrc FROM pg_proc WHERE oid = 'fencegate.fence(text,bigint)'::regprocedure").Scan(&body); err != nil || strings.Contains(body, "SELECT token") {
		t.Fatalf("fence body after the repair: %q, %v", body, err)
	}
	if !strings.Contains(logs.String(), "fencegate schema repaired through the admin connection") || !strings.Contains(logs.String(), "is altered") {
		t.Errorf("no log line of the repair:\n%s", logs.String())
	}
}

// A schema dropped while tables still carry its resource column is not
// reinstalled empty (every old token would pass again, and the tables
// would be unprotected): sessions are refused until an administrator acts.
func TestAdminDoesNotReinstallADroppedSchema(t *testing.T) {
	fx := newFixture(t, everySession)
	proxied := proxytest.Start(t, fx.direct, withAdmin(fx.admin, fx.db.Owner, nil))
	admitted(t, proxied)
	execAdmin(t, fx.admin, "DROP SCHEMA fencegate CASCADE")
	pe := refusedWith(t, proxied, fencegate.CodeSchemaInvalid)
	for _, s := range []string{"could not repair", "public.orders", "dropped"} {
		if !strings.Contains(pe.Message, s) {
			t.Errorf("message %q does not say %q", pe.Message, s)
		}
	}
	var n int
	if err := connect(t, fx.admin).QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = 'fencegate'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema fencegate reinstalled: %d, %v", n, err)
	}
}

// A database that holds the schema the proxy used to install (version 1,
// owned by the application role) is upgraded by a proxy with an admin
// connection: the application role, which owned the schema, is then an
// ordinary application role and is admitted; its marks are kept. Without
// an admin connection the session is refused for the schema (FG005), not
// for the role.
func TestAdminUpgradesTheFormerSchema(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	v1, err := os.ReadFile("../pgfence/testdata/schema_v1.sql")
	if err != nil {
		t.Fatal(err)
	}
	execAdmin(t, db.DSN, "GRANT CREATE ON DATABASE "+strings.TrimPrefix(mustURL(t, db.DSN).Path, "/")+" TO "+db.App)
	app := connect(t, db.AppDSN)
	ctx := context.Background()
	if _, err := app.Exec(ctx, string(v1), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("install version 1: %v", err)
	}
	if err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET TRANSACTION READ WRITE"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT fencegate.fence('order:1', 41)")
		return err
	}); err != nil {
		t.Fatalf("version 1 fence: %v", err)
	}
	pe := refusedWith(t, proxytest.Start(t, db.AppDSN), fencegate.CodeSchemaInvalid)
	t.Logf("without an admin connection: %s", pe.Message)
	proxied := proxytest.Start(t, db.AppDSN, withAdmin(db.DSN, db.Owner, nil))
	c := connect(t, proxied)
	if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fencegate.FenceSQL, "order:1", 40)
		return err
	}); sqlstate(err) != fencegate.CodeStaleToken {
		t.Fatalf("fence below the version 1 mark after the upgrade: %v, want FG001", err)
	}
}

// An admin connection that does not work leaves sessions refused with a
// message that says so, and neither the message nor the logs show its
// password.
func TestAdminFailureIsClearAndSecret(t *testing.T) {
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	const secret = "s3cret-admin-pw"
	admin := asUser(t, db.DSN, "no_such_admin", "")
	admin = strings.Replace(admin, "no_such_admin@", "no_such_admin:"+secret+"@", 1)
	var logs logBuffer
	proxied := proxytest.Start(t, db.AppDSN, withAdmin(admin, db.Owner, &logs))
	pe := refusedWith(t, proxied, fencegate.CodeSchemaInvalid)
	if !strings.Contains(pe.Message, "could not repair") || !strings.Contains(pe.Message, "no_such_admin") {
		t.Errorf("message %q does not say what failed", pe.Message)
	}
	if strings.Contains(pe.Message+pe.Hint, secret) || strings.Contains(logs.String(), secret) {
		t.Fatalf("the admin password leaked:\n%s\n%s", pe.Message, logs.String())
	}
}
