package pgfence_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// An application role may lock the protected tables it writes (LOCK TABLE
// needs only UPDATE): holding ACCESS EXCLUSIVE on every one of them, in a
// transaction, must not stall the health check of a sound schema, nor the
// gate's admission of new sessions, which runs it. (The check used to
// deparse each table's resource expression, which opens the table: every
// new session through the gate waited behind the lock and was refused
// after the gate's 10 s statement timeout.)
func TestLockedProtectedTablesDoNotStallTheGate(t *testing.T) {
	ctx := context.Background()
	f := newFixtureVia(t, direct)
	locker := f.app
	if _, err := locker.Exec(ctx, `BEGIN; LOCK TABLE shop.orders, shop.lines, shop.notes, shop.events, shop.ledger IN ACCESS EXCLUSIVE MODE`,
		pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("the application role locks its protected tables: %v", err)
	}
	defer locker.Exec(ctx, "ROLLBACK")

	admin := f.db.Admin(t)
	start := time.Now()
	if _, err := admin.Exec(ctx, "SET statement_timeout = '3s'"); err != nil {
		t.Fatal(err)
	}
	rows, err := admin.Query(ctx, pgfence.HealthQuery)
	if err != nil {
		t.Fatalf("HealthQuery while the tables are locked: %v", err)
	}
	var problems []string
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		problems = append(problems, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("HealthQuery while the tables are locked (after %v): %v", time.Since(start), err)
	}
	if len(problems) != 0 {
		t.Fatalf("HealthQuery found problems in a sound schema: %v", problems)
	}

	// Through a gate that checks every session.
	dsn := proxytest.Start(t, f.db.AppDSN, proxytest.WithConfig(func(c *proxy.Config) { c.CheckInterval = -1 }))
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(cctx, dsn)
	if err != nil {
		t.Fatalf("a new session through the gate while the tables are locked: %v", err)
	}
	c.Close(ctx)
}
