package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/jackc/pgx/v5"
)

// exampleRedis is the local Redis the runnable examples use.
const exampleRedis = "127.0.0.1:6379"

// examplePrefix keeps the examples' keys apart from other users of Redis.
func examplePrefix() lockclient.Option {
	return lockclient.WithKeyPrefix(fmt.Sprintf("fencegate:example:%x:", rand.Uint64()))
}

// An efficiency lock on one Redis: no token service, so locks carry no
// fencing token. Good enough where running a job twice only wastes time.
func Example() {
	ctx := context.Background()
	c, err := lockclient.Dial([]string{exampleRedis}, nil, examplePrefix(), lockclient.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Acquire(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", l.Resource(), "token:", l.Token(), "fenced:", c.Fenced())
	fmt.Println("valid for at most the TTL:", time.Until(l.ValidUntil()) <= 30*time.Second)
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}
	<-l.Done()
	fmt.Println("after release:", context.Cause(l.Context()))
	// Output:
	// held: nightly-report token: 0 fenced: false
	// valid for at most the TTL: true
	// after release: lockclient: lock released
}

// TryAcquire makes one attempt; a lock held elsewhere yields a
// *NotAcquiredError that says which nodes refused.
func ExampleClient_TryAcquire() {
	ctx := context.Background()
	c, err := lockclient.Dial([]string{exampleRedis}, nil, examplePrefix())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	first, err := c.TryAcquire(ctx, "invoice-42")
	if err != nil {
		log.Fatal(err)
	}
	defer first.Release(ctx)

	_, err = c.TryAcquire(ctx, "invoice-42")
	var nae *lockclient.NotAcquiredError
	fmt.Println(errors.Is(err, lockclient.ErrNotAcquired), errors.As(err, &nae), nae.Taken)
	// Output:
	// true true [127.0.0.1:6379]
}

// Acquire waits while the lock is held and gives up when its context ends;
// the error still says why.
func ExampleClient_Acquire() {
	ctx := context.Background()
	c, err := lockclient.Dial([]string{exampleRedis}, nil, examplePrefix())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	held, err := c.Acquire(ctx, "shard-7")
	if err != nil {
		log.Fatal(err)
	}
	defer held.Release(ctx)

	wait, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = c.Acquire(wait, "shard-7")
	fmt.Println(errors.Is(err, context.DeadlineExceeded), errors.Is(err, lockclient.ErrNotAcquired))
	// Output:
	// true true
}

// Done closes as soon as the lease is over; a lock not refreshed in time is
// lost.
func ExampleLock_Done() {
	ctx := context.Background()
	c, err := lockclient.Dial([]string{exampleRedis}, nil, examplePrefix(), lockclient.WithTTL(100*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "cache-warmup")
	if err != nil {
		log.Fatal(err)
	}
	<-l.Done() // no refresh: the validity passes
	fmt.Println(errors.Is(context.Cause(l.Context()), lockclient.ErrLockLost))
	fmt.Println(errors.Is(l.Refresh(ctx), lockclient.ErrLockLost))
	// Output:
	// true
	// true
}

// A correctness lock: Redlock over five masters, tokens from the fencegate
// token service, and the write in a fenced transaction on a table
// fencegate protects (pgfence.Protect(ctx, admin, "accounts", "'account:'
// || id")), as an application role. A holder that lost its lock and wakes
// up late gets ErrStaleToken and commits nothing.
func ExampleLock_InTx() {
	ctx := context.Background()
	var tokens lockclient.TokenSource // e.g. tokenclient.NewClient([]string{"http://127.0.0.1:7101", ...})
	var db *pgx.Conn                  // e.g. pgx.Connect(ctx, "postgres://app@127.0.0.1:6432/app") (through the proxy, as role app)

	c, err := lockclient.Dial([]string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "10.0.0.5:6379"},
		tokens, lockclient.WithAutoRefresh(0))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "account:42")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)

	err = l.InTx(l.Context(), db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE accounts SET balance = balance - 10 WHERE id = 42")
		return err
	})
	switch {
	case errors.Is(err, lockclient.ErrStaleToken):
		log.Print("lost the lock to a newer holder; nothing written")
	case errors.Is(err, lockclient.ErrCommitUnknown):
		log.Print("may have committed: look before trying again (see the idempotent example)")
	case err != nil:
		log.Fatal(err)
	}
}

// Dial takes host:port or Redis URLs, with a user, a password, a database
// and TLS (rediss://); errors show URLs with the password hidden.
func ExampleDial() {
	ctx := context.Background()
	c, err := lockclient.Dial([]string{"redis://" + exampleRedis + "/0"}, nil, examplePrefix())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "report")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", l.Resource())
	l.Release(ctx)

	_, err = lockclient.Dial([]string{"rediss://app:s3cret@10.0.0.7:6379/orders"}, nil)
	fmt.Println(err)
	// Output:
	// held: report
	// lockclient: Redis address 1 (rediss://app:xxxxx@10.0.0.7:6379/orders): redis: invalid database number: "orders"; want redis://[user:password@]host:port[/db], rediss://... for TLS, or unix:///path
}
