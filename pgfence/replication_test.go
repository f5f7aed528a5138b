package pgfence_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
)

// startCluster starts a PostgreSQL server of the test's own, of the major
// under test, with the given settings: the shared server cannot be
// restarted with other settings.
func startCluster(t *testing.T, settings ...string) (dsn, logPath string) {
	t.Helper()
	return testutil.StartPostgres(t, testutil.PostgresBinDir(t), settings...)
}

func withDB(t *testing.T, dsn, db string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", cfg.Host, cfg.Port, db)
}

// TestApplyWorker: the logical replication apply worker, which fires
// row-level triggers only and runs with session_replication_role =
// replica, cannot write a protected table: its transactions hold no fence.
// Rows of an unprotected table in the same subscription arrive, which shows
// that replication itself works.
func TestApplyWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server of its own")
	}
	ctx := context.Background()
	server, logPath := startCluster(t, "wal_level=logical", "max_wal_senders=6", "max_replication_slots=6", "wal_retrieve_retry_interval=200ms")
	admin := pgfencetest.Connect(t, server)
	mustExec(t, admin, "CREATE DATABASE pub")
	mustExec(t, admin, "CREATE DATABASE sub")
	pub := pgfencetest.Connect(t, withDB(t, server, "pub"))
	sub := pgfencetest.Connect(t, withDB(t, server, "sub"))
	const tables = `CREATE TABLE orders (id int PRIMARY KEY, state text); CREATE TABLE plain (id int PRIMARY KEY);
		CREATE TABLE parts (id int, k int, PRIMARY KEY (id, k)) PARTITION BY LIST (k); CREATE TABLE parts_1 PARTITION OF parts FOR VALUES IN (1)`
	mustExec(t, pub, tables)
	mustExec(t, sub, tables)
	if _, err := pgfence.Install(ctx, sub, pgfence.InstallOptions{OwnerRole: "fencegate_owner"}); err != nil {
		t.Fatal(err)
	}
	for tbl, expr := range map[string]string{"orders": "'order:' || id", "parts": "'part:' || id"} {
		if err := pgfence.Protect(ctx, sub, tbl, expr); err != nil {
			t.Fatal(err)
		}
	}
	// Two subscriptions: a failing transaction blocks the rest of its own.
	for i, pubTables := range []string{"orders, plain", "parts"} {
		name := fmt.Sprintf("s%d", i)
		mustExec(t, pub, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s", name, pubTables))
		mustExec(t, pub, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", name))
		mustExec(t, sub, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION 'host=127.0.0.1 port=%d dbname=pub user=postgres' PUBLICATION %s WITH (create_slot = false, slot_name = '%s', copy_data = false)",
			name, portOf(t, server), name, name))
		t.Cleanup(func() {
			c, err := pgx.Connect(context.Background(), withDB(t, server, "sub"))
			if err == nil {
				_, _ = c.Exec(context.Background(), "ALTER SUBSCRIPTION "+name+" DISABLE; ALTER SUBSCRIPTION "+name+" SET (slot_name = NONE); DROP SUBSCRIPTION "+name)
				c.Close(context.Background())
			}
		})
	}
	mustExec(t, pub, "INSERT INTO plain VALUES (1)")
	testutil.WaitFor(t, 30*time.Second, "the unprotected row to arrive", func() error {
		var n int
		if err := sub.QueryRow(ctx, "SELECT count(*) FROM plain").Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d rows", n)
		}
		return nil
	})
	mustExec(t, pub, "INSERT INTO orders VALUES (1, 'replicated'); INSERT INTO parts VALUES (1, 1)")
	for _, want := range []string{
		"fencegate: write to public.orders refused: this transaction holds no fence on resource 'order:1'",
		"fencegate: write to public.parts_1 refused: this transaction holds no fence on resource 'part:1'",
	} {
		testutil.WaitFor(t, 30*time.Second, "the apply worker's refusal in the server log", func() error {
			b, err := os.ReadFile(logPath)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), want) {
				return fmt.Errorf("no %q in the log yet", want)
			}
			return nil
		})
	}
	var n int
	for _, tbl := range []string{"orders", "parts"} {
		if err := sub.QueryRow(ctx, "SELECT count(*) FROM "+tbl).Scan(&n); err != nil || n != 0 {
			t.Fatalf("protected table %s on the subscriber has %d rows (%v), want 0", tbl, n, err)
		}
	}
}

func portOf(t *testing.T, dsn string) int {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return int(cfg.Port)
}
