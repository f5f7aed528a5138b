package proxy_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
)

// A fenced write through the proxy, and a stale one it rejects.
func Example() {
	p, err := proxy.New(proxy.Config{
		Listen:   "127.0.0.1:0",
		Upstream: "postgres://127.0.0.1:5432?sslmode=disable",
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Shutdown(ctx)
	}()
	ctx := context.Background()
	db, drop := exampleDB()
	defer drop()
	conn, err := pgx.Connect(ctx, "postgres://postgres@"+p.Addr()+"/"+db+"?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	resource := "order:42"
	fence := func(token int64) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var accepted int64
			if err := tx.QueryRow(ctx, "SELECT fencegate.fence($1, $2)", resource, token).Scan(&accepted); err != nil {
				return err
			}
			fmt.Println("accepted", accepted)
			// ... the transaction's reads and writes ...
			return nil
		})
	}
	_ = fence(34)
	err = fence(33)
	fmt.Println("stale:", sqlstate(err))
	// Output:
	// accepted 34
	// stale: FG001
}

// The SQL the proxy runs for a fence call, for clients that talk to
// PostgreSQL directly.
func ExampleEnsureSchema() {
	ctx := context.Background()
	db, drop := exampleDB()
	defer drop()
	conn, err := pgx.Connect(ctx, "postgres://postgres@127.0.0.1:5432/"+db+"?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := proxy.EnsureSchema(ctx, conn); err != nil {
		log.Fatal(err)
	}
	fmt.Println(proxy.FenceSQL)
	// Output:
	// SET TRANSACTION READ WRITE; SELECT fencegate.fence($1, $2)
}

// exampleDB creates a scratch database for an example and returns its name
// and a function that drops it.
func exampleDB() (string, func()) {
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, testutil.PostgresAdminDSN())
	if err != nil {
		log.Fatal(err)
	}
	name := testutil.RandomName("fg_example_")
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		log.Fatal(err)
	}
	return name, func() {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close(ctx)
	}
}
