package pgfence_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// TestUpgradeFromV3 installs versions 3 to 8 as they were shipped,
// protects a table, a partitioned table and an inheritance parent with each,
// takes marks, upgrades, and checks that the marks are kept, that the
// UPDATE checks were re-shaped (since version 7, on tables that hold rows,
// the new rows' resources per statement and a row whose resource changes
// row by row; versions 4 to 6 checked every updated row on its own; version
// 3 read both transition tables everywhere) and that writes are still
// refused without a fence and accepted with one.
func TestUpgradeFromV3(t *testing.T) {
	for v := 3; v <= 8; v++ {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) { testUpgradeShapes(t, v) })
	}
}

func testUpgradeShapes(t *testing.T, v int) {
	ctx := context.Background()
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	admin := installShipped(t, db, v)
	mustExec(t, admin, `GRANT USAGE ON SCHEMA fencegate TO `+db.App+`;
		GRANT EXECUTE ON FUNCTION fencegate.fence(text, bigint), fencegate.fence(text, bigint, text), fencegate.fence_many(text[], bigint) TO `+db.App+`;
		GRANT SELECT ON fencegate.marks TO `+db.App+`;
		CREATE TABLE public.acct (id int PRIMARY KEY, n int);
		CREATE TABLE public.ev (acct int, n int) PARTITION BY LIST (acct);
		CREATE TABLE public.ev_1 PARTITION OF public.ev FOR VALUES IN (1);
		CREATE TABLE public.ev_2 PARTITION OF public.ev FOR VALUES IN (2);
		CREATE TABLE public.book (acct int, n int);
		CREATE TABLE public.book_old () INHERITS (public.book);
		INSERT INTO public.acct VALUES (1, 0), (2, 0);
		INSERT INTO public.ev VALUES (1, 0), (2, 0);
		INSERT INTO public.book VALUES (1, 0);
		INSERT INTO public.book_old VALUES (2, 0);
		SELECT fencegate.protect('public.acct', $$'acct:' || id$$);
		SELECT fencegate.protect('public.ev', $$'acct:' || acct$$);
		SELECT fencegate.protect('public.book', $$'acct:' || acct$$);
		GRANT SELECT, INSERT, UPDATE, DELETE ON public.acct, public.ev, public.ev_1, public.ev_2, public.book, public.book_old TO `+db.App)
	app := db.AppConn(t)
	for r, tok := range map[string]int64{"acct:1": 3, "acct:2": 9} {
		if _, err := app.Exec(ctx, fencegate.FenceSQL, r, tok); err != nil {
			t.Fatal(err)
		}
	}
	updShape := func() string {
		var s string
		if err := admin.QueryRow(ctx, `SELECT string_agg(t.tgrelid::regclass::text || ':' || t.tgtype || ':' || t.tgfoid::regproc::text, ' ' ORDER BY t.tgrelid::regclass::text)
			FROM pg_trigger t WHERE t.tgname = 'fencegate_upd'`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := "acct:16:fencegate.check_update book:16:fencegate.check_update book_old:16:fencegate.check_update ev:16:fencegate.check_update ev_1:16:fencegate.check_update ev_2:16:fencegate.check_update"
	if v >= 4 {
		want = "acct:17:fencegate.check_row book:17:fencegate.check_row book_old:17:fencegate.check_row ev:16:fencegate.check_update ev_1:17:fencegate.check_row ev_2:17:fencegate.check_row"
	}
	if v >= 7 {
		want = "acct:16:fencegate.check_update_new book:16:fencegate.check_update_new book_old:16:fencegate.check_update_new ev:16:fencegate.check_update ev_1:16:fencegate.check_update_new ev_2:16:fencegate.check_update_new"
	}
	if got := updShape(); got != want {
		t.Fatalf("version %d UPDATE checks: %s, want %s", v, got, want)
	}

	rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.FromVersion != v || rep.ToVersion != pgfence.SchemaVersion || rep.Marks != 2 || rep.Tables != 6 {
		t.Fatalf("upgrade report: %+v", rep)
	}
	t.Logf("upgrade report: %+v", rep)
	if got := marks(t, admin); !sameMarks(got, map[string]int64{"acct:1": 3, "acct:2": 9}) {
		t.Fatalf("marks after upgrade: %v", got)
	}
	if got := health(t, admin); len(got) != 0 {
		t.Fatalf("health after upgrade: %v", got)
	}
	want = "acct:16:fencegate.check_update_new book:16:fencegate.check_update_new book_old:16:fencegate.check_update_new ev:16:fencegate.check_update ev_1:16:fencegate.check_update_new ev_2:16:fencegate.check_update_new"
	if got := updShape(); got != want {
		t.Fatalf("UPDATE checks after the upgrade: %s, want %s", got, want)
	}
	var moves string
	if err := admin.QueryRow(ctx, `SELECT string_agg(t.tgrelid::regclass::text || ':' || t.tgtype || ':' || t.tgfoid::regproc::text, ' ' ORDER BY t.tgrelid::regclass::text)
		FROM pg_trigger t WHERE t.tgname = 'fencegate_move' AND t.tgqual IS NOT NULL`).Scan(&moves); err != nil {
		t.Fatal(err)
	}
	if want := "acct:17:fencegate.check_row book:17:fencegate.check_row book_old:17:fencegate.check_row ev_1:17:fencegate.check_row ev_2:17:fencegate.check_row"; moves != want {
		t.Fatalf("row checks of resource changes after the upgrade: %s, want %s", moves, want)
	}
	rep2, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{OwnerRole: db.Owner, RequireInstalled: true})
	if err != nil || len(rep2.Actions) != 0 {
		t.Fatalf("second upgrade: %v, actions %q", err, rep2.Actions)
	}

	// Unfenced: every UPDATE path is refused, rows unchanged.
	for _, q := range []string{
		"UPDATE public.acct SET n = n + 1 WHERE id = 1",
		"UPDATE public.acct SET id = 3 WHERE id = 1",
		"UPDATE public.ev SET n = n + 1 WHERE acct = 2",
		"UPDATE public.ev_1 SET n = n + 1",
		"UPDATE public.book SET n = n + 1",
		"UPDATE public.book_old SET n = n + 1",
	} {
		err := script(app, "BEGIN", q, "COMMIT")
		expectErr(t, q, err, fencegate.CodeUnfenced)
	}
	// Fenced on the new resource only: moving a row to another resource
	// (and another partition) needs the old one's fence too.
	for _, q := range []string{
		"UPDATE public.acct SET id = 3 WHERE id = 1",
		"UPDATE public.ev SET acct = 2 WHERE acct = 1",
		"UPDATE public.book SET acct = 3 WHERE acct = 1",
	} {
		err := script(app, "BEGIN", "SELECT fencegate.fence('acct:2', 9)", "SELECT fencegate.fence('acct:3', 1)", q, "COMMIT")
		expectErr(t, q, err, fencegate.CodeUnfenced)
	}
	if err := script(app, "BEGIN", "SELECT fencegate.fence('acct:1', 3)", "UPDATE public.acct SET n = n + 1 WHERE id = 1",
		"UPDATE public.ev SET n = n + 1 WHERE acct = 1", "UPDATE public.book SET n = n + 1 WHERE acct = 1", "COMMIT"); err != nil {
		t.Fatalf("fenced UPDATEs after the upgrade: %v", err)
	}
	var sum int
	if err := admin.QueryRow(ctx, "SELECT (SELECT sum(n) FROM public.acct) + (SELECT sum(n) FROM public.ev) + (SELECT sum(n) FROM public.book)").Scan(&sum); err != nil || sum != 3 {
		t.Fatalf("rows after the upgrade: sum %d, %v; want 3", sum, err)
	}
}

// installShipped installs testdata/schema_vN.sql, a schema version as it
// was shipped, into db's empty schema fencegate as the owner role, the way
// that version's installer did, and returns an admin connection.
func installShipped(t *testing.T, db *pgfencetest.DB, n int) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	sql, err := os.ReadFile(fmt.Sprintf("testdata/schema_v%d.sql", n))
	if err != nil {
		t.Fatal(err)
	}
	admin := db.Admin(t)
	mustExec(t, admin, "CREATE SCHEMA fencegate AUTHORIZATION "+db.Owner)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE "+db.Owner); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, string(sql), pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("install version %d: %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return admin
}
