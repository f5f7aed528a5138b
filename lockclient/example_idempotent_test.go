package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
)

// A write that happens once however often it is tried. The charge has a
// key of its own (the order, unique in the table) and keeps the token of
// the lock that wrote it. If InTx ever answers ErrCommitUnknown (the
// connection broke while COMMIT was on its way), the caller runs the same
// code again under a new lock: it finds the row if the first COMMIT landed
// and charges only if it did not. Retrying blindly would charge twice: the
// new lock's token is newer, so the fence lets the retry through.
func ExampleLock_InTx_idempotent() {
	ctx := context.Background()
	db, tokens, done := exampleShop(ctx) // a protected table behind a fencegate proxy, and a token source
	defer done()
	locks, err := lockclient.Dial([]string{exampleRedis}, tokens, examplePrefix())
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()

	// charge charges order 42 once; it reports who did.
	charge := func(l *lockclient.Lock) (chargedBy int64, err error) {
		err = l.InTx(ctx, db, func(tx pgx.Tx) error { // the fence runs first
			err := tx.QueryRow(ctx, "SELECT token FROM charges WHERE order_id = 42").Scan(&chargedBy)
			if !errors.Is(err, pgx.ErrNoRows) {
				return err // nil: charged already, by chargedBy
			}
			chargedBy = l.Token()
			_, err = tx.Exec(ctx, "INSERT INTO charges (order_id, amount, token) VALUES (42, 1000, $1)", chargedBy)
			return err
		})
		return chargedBy, err
	}

	first, err := locks.Acquire(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	by, err := charge(first)
	first.Release(ctx)
	if err != nil && !errors.Is(err, lockclient.ErrCommitUnknown) {
		log.Fatal(err) // after ErrCommitUnknown, charged or not: the next attempt finds out
	}
	fmt.Println("first attempt charged:", by == first.Token())

	// The same code again, as after ErrCommitUnknown, under a new lock.
	second, err := locks.Acquire(ctx, "order:42")
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	by, err = charge(second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second attempt charged:", by == second.Token(), "- found the first one's charge:", by == first.Token())
	// Output:
	// first attempt charged: true
	// second attempt charged: false - found the first one's charge: true
}

// exampleShop creates a database with a charges table on the local
// PostgreSQL, protected by fencegate (a row belongs to resource
// "order:<order_id>"), and an application role that may write it; it
// starts a fencegate proxy in front of the server and returns a connection
// through the proxy as the application role, a token source, and a
// function that removes it all.
func exampleShop(ctx context.Context) (*pgx.Conn, lockclient.TokenSource, func()) {
	const server = "postgres://postgres@127.0.0.1:5432"
	admin, err := pgx.Connect(ctx, server+"/postgres?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	id := rand.Uint32()
	name, owner, app := fmt.Sprintf("fg_example_%x", id), fmt.Sprintf("fg_example_owner_%x", id), fmt.Sprintf("fg_example_app_%x", id)
	for _, sql := range []string{"CREATE DATABASE " + name, "CREATE ROLE " + app + " LOGIN"} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			log.Fatal(err)
		}
	}
	setup, err := pgx.Connect(ctx, server+"/"+name+"?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	// The administrator's part: the schema (its owner role, the grants of
	// the application role), the table, its protection, the table's grants.
	if _, err := pgfence.Install(ctx, setup, pgfence.InstallOptions{OwnerRole: owner, Grant: []string{app}}); err != nil {
		log.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `CREATE TABLE charges (order_id int PRIMARY KEY, amount int NOT NULL, token bigint NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	if err := pgfence.Protect(ctx, setup, "charges", "'order:' || order_id"); err != nil {
		log.Fatal(err)
	}
	if _, err := setup.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON charges TO "+app); err != nil {
		log.Fatal(err)
	}
	setup.Close(ctx)
	p, err := proxy.New(proxy.Config{Listen: "127.0.0.1:0", Upstream: server + "?sslmode=disable",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	db, err := pgx.Connect(ctx, "postgres://"+app+"@"+p.Addr()+"/"+name+"?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	return db, &counter{}, func() {
		db.Close(ctx)
		p.Shutdown(ctx)
		admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		admin.Exec(ctx, "DROP ROLE "+app)
		admin.Exec(ctx, "DROP ROLE "+owner)
		admin.Close(ctx)
	}
}

// counter stands in for the token service (tokenclient.NewClient in a
// real deployment): one process, so a counter is monotonic enough.
type counter struct{ n atomic.Int64 }

func (c *counter) NextToken(context.Context, string) (int64, error) { return c.n.Add(1), nil }
