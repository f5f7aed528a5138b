package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

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
		c.RepairInterval = -1
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

// inDatabase returns dsn with its database replaced.
func inDatabase(t testing.TB, dsn, db string) string {
	t.Helper()
	u := mustURL(t, dsn)
	u.Path = "/" + db
	return u.String()
}

// The proxy's repair runs as the administrator in a database the
// application shapes: the application role may create in schema public, and
// the database's sessions search public first (ALTER DATABASE ... SET
// search_path, which its owner may run). The application plants copies of
// the catalog functions and operators the installer calls, each of which
// tries to make the application role a superuser. The repair must run none
// of them, and still repair.
func TestAdminRepairRunsNoPlantedCode(t *testing.T) {
	db := pgfencetest.New(t)
	ctx := context.Background()
	name := strings.TrimPrefix(mustURL(t, db.DSN).Path, "/")
	execAdmin(t, db.DSN, "GRANT CREATE ON SCHEMA public TO "+db.App)
	execAdmin(t, db.DSN, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" SET search_path = public, pg_catalog")
	app := connect(t, db.AppDSN)
	plant := fmt.Sprintf(`
CREATE TABLE public.fg_ran (what text, role text, PRIMARY KEY (what, role));
GRANT SELECT, INSERT ON public.fg_ran TO PUBLIC;
CREATE FUNCTION public.fg_escalate(what text) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog AS $f$
BEGIN
	INSERT INTO public.fg_ran VALUES (what, current_user) ON CONFLICT DO NOTHING;
	IF (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = current_user)
	   AND NOT (SELECT r.rolsuper FROM pg_roles r WHERE r.rolname = %[1]s) THEN
		EXECUTE format('ALTER ROLE %%I SUPERUSER', %[1]s);
	END IF;
	RETURN true;
END $f$;
CREATE FUNCTION public.has_database_privilege(name, text) RETURNS boolean LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('has_database_privilege'); SELECT pg_catalog.has_database_privilege($1, $2) $f$;
CREATE FUNCTION public.current_database() RETURNS name LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('current_database'); SELECT pg_catalog.current_database() $f$;
CREATE FUNCTION public.to_regclass(text) RETURNS regclass LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('to_regclass'); SELECT pg_catalog.to_regclass($1) $f$;
CREATE FUNCTION public.to_regnamespace(text) RETURNS regnamespace LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('to_regnamespace'); SELECT pg_catalog.to_regnamespace($1) $f$;
CREATE FUNCTION public.pg_has_role(name, regrole, text) RETURNS boolean LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('pg_has_role'); SELECT pg_catalog.pg_has_role($1, $2, $3) $f$;
CREATE FUNCTION public.fg_eq(oid, oid) RETURNS boolean LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('= (oid, oid)'); SELECT $1 OPERATOR(pg_catalog.=) $2 $f$;
CREATE OPERATOR public.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = public.fg_eq);
CREATE FUNCTION public.fg_eq(name, name) RETURNS boolean LANGUAGE sql
	AS $f$ SELECT public.fg_escalate('= (name, name)'); SELECT $1 OPERATOR(pg_catalog.=) $2 $f$;
CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = name, FUNCTION = public.fg_eq);
`, quoteLiteral(db.App))
	if _, err := app.Exec(ctx, plant, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("plant: %v", err)
	}
	// Alter the fence, so that the first session through the proxy has the
	// schema repaired.
	execAdmin(t, db.DSN, `CREATE OR REPLACE FUNCTION fencegate.fence(resource pg_catalog.text, token pg_catalog.int8) RETURNS pg_catalog.int8
		LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT token'`)
	var logs logBuffer
	proxied, p := proxytest.StartProxy(t, db.AppDSN, withAdmin(db.DSN, db.Owner, &logs))
	sessionErr := func() error {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		c, err := pgx.Connect(cctx, proxied)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		if err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, fencegate.FenceSQL, "r", 3)
			return err
		}); err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, fencegate.FenceSQL, "r", 2)
			return err
		})
		if sqlstate(err) != fencegate.CodeStaleToken {
			return fmt.Errorf("a lower token after the repair: %v, want FG001", err)
		}
		return nil
	}()
	check := connect(t, db.DSN)
	if _, err := check.Exec(ctx, "SET search_path = pg_catalog, pg_temp"); err != nil {
		t.Fatal(err)
	}
	var super bool
	if err := check.QueryRow(ctx, "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1", db.App).Scan(&super); err != nil {
		t.Fatal(err)
	}
	if super {
		t.Errorf("the application role %s became a superuser", db.App)
	}
	rows, err := check.Query(ctx, "SELECT what || ' as ' || role FROM public.fg_ran WHERE role <> $1 ORDER BY 1", db.App)
	if err != nil {
		t.Fatal(err)
	}
	ran, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(ran) > 0 {
		t.Errorf("the repair ran the application's code: %s", strings.Join(ran, "; "))
	}
	if sessionErr != nil {
		t.Fatalf("a fenced session through the proxy after the repair: %v\n%s", sessionErr, logs.String())
	}
	if got := testutilCounter(p.Metrics().SchemaRepairs); got != 1 {
		t.Errorf("schema repairs = %v, want 1", got)
	}
}

// A client names the database it connects to. The proxy repairs only
// databases that hold schema fencegate, installs it from nothing only into
// the database its admin connection names, and never touches a template:
// whatever it put there would be copied into every database created from
// it.
func TestAdminLeavesOtherDatabasesAlone(t *testing.T) {
	ctx := context.Background()
	home := pgfencetest.New(t)
	bare := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	tmpl := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	tmplName := strings.TrimPrefix(mustURL(t, tmpl.DSN).Path, "/")
	execAdmin(t, tmpl.DSN, "ALTER DATABASE "+pgx.Identifier{tmplName}.Sanitize()+" IS_TEMPLATE true")
	t.Cleanup(func() {
		execAdmin(t, home.DSN, "ALTER DATABASE "+pgx.Identifier{tmplName}.Sanitize()+" IS_TEMPLATE false")
	})
	other := pgfencetest.New(t)
	proxied := proxytest.Start(t, home.AppDSN, withAdmin(home.DSN, home.Owner, nil))
	admitted(t, proxied)

	for _, tc := range []struct {
		db   *pgfencetest.DB
		want string
	}{
		{bare, "holds no schema fencegate"},
		{tmpl, "is a template"},
	} {
		dbName := strings.TrimPrefix(mustURL(t, tc.db.DSN).Path, "/")
		pe := refusedWith(t, inDatabase(t, proxied, dbName), fencegate.CodeSchemaInvalid)
		if !strings.Contains(pe.Message, tc.want) {
			t.Errorf("database %s: refused with %q; want it to say %q", dbName, pe.Message, tc.want)
		}
		var n int
		if err := connect(t, tc.db.DSN).QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname OPERATOR(pg_catalog.=) 'fencegate'").Scan(&n); err != nil || n != 0 {
			t.Errorf("database %s: schema fencegate installed by the proxy (%d, %v)", dbName, n, err)
		}
	}
	// A database that holds the schema is repaired, whichever it is.
	execAdmin(t, other.DSN, `CREATE OR REPLACE FUNCTION fencegate.fence(resource pg_catalog.text, token pg_catalog.int8) RETURNS pg_catalog.int8
		LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS 'SELECT token'`)
	otherName := strings.TrimPrefix(mustURL(t, other.DSN).Path, "/")
	u := mustURL(t, inDatabase(t, proxied, otherName))
	u.User = url.User(other.App)
	admitted(t, u.String())
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
