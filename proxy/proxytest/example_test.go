package proxytest_test

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/jackc/pgx/v5"
)

// A test of a program that writes through the proxy, as it reads in that
// program's own _test.go file: the program connects to the proxy's DSN
// instead of PostgreSQL's.
func Example() {
	TestOrders := func(t *testing.T) {
		// A database of the test's own with schema fencegate installed,
		// reached as its application role.
		db := pgfencetest.New(t)
		dsn := proxytest.Start(t, db.AppDSN)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		// ... run the program's transactions on conn ...
	}
	_ = TestOrders
}
