package pgfence_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// An administrator installs the schema, grants an application role, and
// protects a table; the application then writes only under a fence.
func Example() {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close(ctx)
	rep, err := pgfence.Install(ctx, admin, pgfence.InstallOptions{Grant: []string{"app"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range rep.Actions {
		fmt.Println(a)
	}
	if err := pgfence.Protect(ctx, admin, "orders", "'order:' || id"); err != nil {
		log.Fatal(err)
	}

	// The application, with a token from the lock service:
	app, err := pgx.Connect(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close(ctx)
	tx, err := app.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, fencegate.FenceSQL, "order:42", int64(34)); err != nil {
		log.Fatal(err) // SQLSTATE FG001 (fencegate.CodeStaleToken): a newer holder wrote order:42
	}
	if _, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = 42"); err != nil {
		log.Fatal(err) // SQLSTATE FG002 (fencegate.CodeUnfenced) for any order but 42
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// The gate's check of a session's role, at startup: no rows means an
// ordinary role.
func ExamplePrivilegeQuery() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, pgfence.PrivilegeQuery, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		log.Fatal(err)
	}
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range reasons {
		fmt.Println("refuse:", r)
	}
}

// Lowering a mark, after restoring a backup, is recorded with a reason.
func ExampleSetMark() {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close(ctx)
	if err := pgfence.SetMark(ctx, admin, "order:42", 30, "restored the 03:00 backup"); err != nil {
		log.Fatal(err)
	}
}
