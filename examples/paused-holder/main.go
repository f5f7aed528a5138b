// Command paused-holder is the library-level version of
// "fencegate demo paused-holder": two clients of one lock, the first stalls
// past its TTL (a stand-in for a GC pause: it simply sleeps), the second
// takes the lock and writes, and the first wakes up and writes too. The
// table is protected and every write is fenced with the lock's token, so
// PostgreSQL refuses the late write (lockclient.ErrStaleToken) and the data
// stays right; the fencegate proxy the clients connect through is a gate in
// front of it, not the enforcer.
//
// The program first does the administrator's part with the -postgres DSN:
// on that server it creates a database of its own, installs schema
// fencegate there (owned by a NOLOGIN role of its own), creates the
// account's table and protects it (the table is one resource, the one both
// clients lock), and creates an application role for the run; both clients
// connect through the proxy as that role, to that database. The database
// and the roles are dropped at the end: the server is left as it was.
//
// Run it against "fencegate dev":
//
//	go run ./examples/paused-holder
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/demo/appdb"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
)

func main() {
	dsn := flag.String("db", "postgres://127.0.0.1:6432/postgres?sslmode=disable", "PostgreSQL DSN through the fencegate proxy; its user and database are replaced by the application role and the database the program creates")
	direct := flag.String("postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "the same PostgreSQL server, direct, as an administrator: creates a database of the run's own (dropped at the end) with schema fencegate, the example's table protected, and the application role")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis host:port")
	tokens := flag.String("tokens", "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103", "token service URLs")
	ttl := flag.Duration("ttl", 500*time.Millisecond, "lock TTL")
	flag.Parse()
	if err := run(context.Background(), *direct, *dsn, *redisAddr, strings.Split(*tokens, ","), *ttl); err != nil {
		log.Fatal(err)
	}
}

// outcome is what happened, for tests.
type outcome struct {
	Token1, Token2 int64
	Err1           error // client 1's late write
	Balance        int64 // the account's balance afterwards
}

func run(ctx context.Context, direct, dsn, redisAddr string, tokenURLs []string, ttl time.Duration) error {
	o, err := scenario(ctx, direct, dsn, redisAddr, tokenURLs, ttl, "")
	if err != nil {
		return err
	}
	fmt.Printf("client 1 got token %d, stalled past its %v TTL\n", o.Token1, ttl)
	fmt.Printf("client 2 got token %d and wrote: balance += 30\n", o.Token2)
	switch {
	case errors.Is(o.Err1, lockclient.ErrStaleToken):
		fmt.Printf("client 1 woke up and wrote: rejected, %v\n", o.Err1)
	case o.Err1 == nil:
		fmt.Println("client 1 woke up and wrote: ACCEPTED (is -db really the fencegate proxy?)")
	default:
		return o.Err1
	}
	fmt.Printf("balance is %d (100 + 30: client 1's stale +50 never landed)\n", o.Balance)
	if !errors.Is(o.Err1, lockclient.ErrStaleToken) {
		return errors.New("the stale write was not rejected")
	}
	return nil
}

// scenario plays the two clients, in a database of its own on the server
// of direct. owner names the owner role of schema fencegate (empty: a role
// of the run's own, dropped at the end).
func scenario(ctx context.Context, direct, dsn, redisAddr string, tokenURLs []string, ttl time.Duration, owner string) (*outcome, error) {
	// The administrator's part: the table holds one account, and the whole
	// table is the resource both clients lock.
	table := fmt.Sprintf("paused_holder_%d", time.Now().UnixNano())
	resource := "account:" + table
	app, err := appdb.Setup(ctx, direct, []appdb.Table{{Name: table,
		Create:   "CREATE TABLE " + table + " (id int PRIMARY KEY, balance bigint NOT NULL); INSERT INTO " + table + " VALUES (1, 100)",
		Resource: "'" + resource + "'"}}, appdb.Options{OwnerRole: owner, RolePrefix: "fg_paused_", OwnDatabase: true})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	appDSN, err := app.DSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("-db: %w", err)
	}
	setup, err := pgx.Connect(ctx, app.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to database %s as the administrator: %w (is fencegate dev running?)", app.Database, err)
	}
	defer setup.Close(context.Background())

	db, err := pgx.Connect(ctx, appDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to the fencegate proxy as %s: %w (is -db the fencegate proxy?)", app.Role, err)
	}
	defer db.Close(context.Background())
	tc, err := tokenclient.NewClient(tokenURLs)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	locks, err := lockclient.Dial([]string{redisAddr}, tc, lockclient.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	defer locks.Close()

	add := func(l *lockclient.Lock, amount int64) error {
		return l.InTx(ctx, db, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+table+" SET balance = balance + $1 WHERE id = 1", amount)
			return err
		})
	}

	o := &outcome{}
	l1, err := locks.Acquire(ctx, resource)
	if err != nil {
		return nil, err
	}
	o.Token1 = l1.Token()
	// Client 1 stalls (GC, swap, a stopped VM...) longer than its TTL.
	select {
	case <-l1.Done(): // the lease is known lost
	case <-time.After(2 * ttl):
	}
	l2, err := locks.Acquire(ctx, resource)
	if err != nil {
		return nil, err
	}
	o.Token2 = l2.Token()
	if err := add(l2, 30); err != nil {
		return nil, fmt.Errorf("client 2: %w", err)
	}
	_ = l2.Release(ctx)
	// Client 1 wakes up and, not knowing better, writes.
	o.Err1 = add(l1, 50)
	_ = l1.Release(ctx)
	if err := setup.QueryRow(ctx, "SELECT balance FROM "+table+" WHERE id = 1").Scan(&o.Balance); err != nil {
		return nil, err
	}
	return o, nil
}
