// Command paused-holder is the library-level version of
// "fencegate demo paused-holder": two clients of one lock, the first stalls
// past its TTL (a stand-in for a GC pause: it simply sleeps), the second
// takes the lock and writes, and the first wakes up and writes too. The
// table is protected and every write is fenced with the lock's token, so
// PostgreSQL refuses the late write (lockclient.ErrStaleToken) and the data
// stays right; the fencegate proxy the clients connect through is a gate in
// front of it, not the enforcer.
//
// The administrator's part comes first, once: setup.sql creates the
// account's table and grants the application role its rows, and
// "fencegate protect" protects it, each row its own resource,
// 'account:' || id (README.md has the commands). Both clients connect as
// the application role, through the proxy (-db).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
)

func main() {
	dsn := flag.String("db", os.Getenv("DATABASE_URL"), "the application role's DSN through the fencegate proxy, as 'fencegate dev' prints it (default $DATABASE_URL)")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis host:port")
	tokens := flag.String("tokens", "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103", "token service URLs")
	ttl := flag.Duration("ttl", 500*time.Millisecond, "lock TTL")
	flag.Parse()
	if *dsn == "" {
		log.Fatal("-db: give the application role's DSN through the proxy ('fencegate dev' prints it)")
	}
	if err := run(context.Background(), *dsn, *redisAddr, strings.Split(*tokens, ","), *ttl); err != nil {
		log.Fatal(err)
	}
}

// resource is the lock of account 1: the table's resource expression is
// 'account:' || id (fencegate protect paused_holder_accounts --resource
// "'account:' || id").
const resource = "account:1"

// outcome is what happened, for tests.
type outcome struct {
	Token1, Token2  int64
	Err1            error // client 1's late write
	Before, Balance int64 // the account's balance before and afterwards
}

func run(ctx context.Context, dsn, redisAddr string, tokenURLs []string, ttl time.Duration) error {
	o, err := scenario(ctx, dsn, redisAddr, tokenURLs, ttl)
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
	fmt.Printf("balance is %d (%d + 30: client 1's stale +50 never landed)\n", o.Balance, o.Before)
	if !errors.Is(o.Err1, lockclient.ErrStaleToken) {
		return errors.New("the stale write was not rejected")
	}
	return nil
}

// scenario plays the two clients on account 1.
func scenario(ctx context.Context, dsn, redisAddr string, tokenURLs []string, ttl time.Duration) (*outcome, error) {
	db, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to the fencegate proxy: %w (is -db the proxy DSN 'fencegate dev' printed?)", err)
	}
	defer db.Close(context.Background())
	o := &outcome{}
	const balance = "SELECT balance FROM paused_holder_accounts WHERE id = 1"
	if err := db.QueryRow(ctx, balance).Scan(&o.Before); err != nil {
		return nil, fmt.Errorf("read account 1: %w (did setup.sql and 'fencegate protect' run? see README.md)", err)
	}
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
			_, err := tx.Exec(ctx, "UPDATE paused_holder_accounts SET balance = balance + $1 WHERE id = 1", amount)
			return err
		})
	}

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
	if err := db.QueryRow(ctx, balance).Scan(&o.Balance); err != nil {
		return nil, err
	}
	return o, nil
}
