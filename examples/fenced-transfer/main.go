// Command fenced-transfer moves money between accounts under a lock, the way
// a correctness-critical job should: every transfer takes the Redis lock and
// its fencing token with lockclient, and does its reads and writes in one
// transaction through the fencegate proxy that starts with the fence. The
// accounts table is protected by fencegate (the whole table is one
// resource), so PostgreSQL refuses any write to it that is not fenced with
// the lock's resource. A worker whose lock expired while it stalled gets
// lockclient.ErrStaleToken instead of overwriting someone else's balances,
// and retries.
//
// The program first does the administrator's part with the -postgres DSN
// (create a database of the run's own on that server, install schema
// fencegate in it, create and protect the table, create an application
// role for the run with the grants it needs), then connects through the
// proxy as that role; it drops the database and its roles at the end.
//
// Run it against "fencegate dev":
//
//	go run ./examples/fenced-transfer
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/demo/appdb"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
)

type config struct {
	Direct, DB, Redis string
	Owner             string // owner role of schema fencegate (default: a role of the run's own)
	Tokens            []string
	Workers           int
	Transfers         int // per worker
	TTL               time.Duration
	Stall             float64 // probability that a worker stalls past the TTL before its transaction
}

func main() {
	var c config
	flag.StringVar(&c.DB, "db", "postgres://127.0.0.1:6432/postgres?sslmode=disable", "PostgreSQL DSN through the fencegate proxy; its user and database are replaced by the application role and the database the program creates")
	flag.StringVar(&c.Direct, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "the same PostgreSQL server, direct, as an administrator: creates a database of the run's own (dropped at the end) with schema fencegate, the accounts protected, and the application role")
	flag.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "Redis host:port")
	tokens := flag.String("tokens", "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103", "token service URLs")
	flag.IntVar(&c.Workers, "workers", 4, "concurrent workers")
	flag.IntVar(&c.Transfers, "transfers", 25, "transfers per worker")
	flag.DurationVar(&c.TTL, "ttl", 300*time.Millisecond, "lock TTL")
	flag.Float64Var(&c.Stall, "stall", 0.1, "chance that a worker stalls past the TTL between taking the lock and its transaction")
	flag.Parse()
	c.Tokens = strings.Split(*tokens, ",")
	res, err := run(context.Background(), c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d transfers committed, %d rejected as stale and retried\n", res.Committed, res.Stale)
	for _, a := range res.Accounts {
		fmt.Printf("  %-6s %8.2f\n", a.Name, float64(a.Cents)/100)
	}
	fmt.Printf("total %.2f (was %.2f); no account below zero: %v\n", float64(res.Total)/100, float64(res.Initial)/100, res.NoneNegative)
	if res.Total != res.Initial || !res.NoneNegative {
		log.Fatal("money was created or destroyed")
	}
}

type account struct {
	Name  string
	Cents int64
}

type result struct {
	Committed, Stale int
	Accounts         []account
	Initial, Total   int64
	NoneNegative     bool
}

var initial = []account{{"alice", 10000}, {"bob", 5000}, {"carol", 2500}, {"dave", 0}}

func run(ctx context.Context, c config) (*result, error) {
	table := fmt.Sprintf("accounts_%d", time.Now().UnixNano())
	resource := "bank:" + table
	res := &result{}
	var fill strings.Builder
	fmt.Fprintf(&fill, "CREATE TABLE %s (name text PRIMARY KEY, cents bigint NOT NULL);\nINSERT INTO %s VALUES ", table, table)
	for i, a := range initial {
		if i > 0 {
			fill.WriteString(", ")
		}
		fmt.Fprintf(&fill, "('%s', %d)", a.Name, a.Cents)
		res.Initial += a.Cents
	}
	// The administrator's part: the whole table is one resource, the one
	// the workers lock.
	app, err := appdb.Setup(ctx, c.Direct, []appdb.Table{{Name: table, Create: fill.String(), Resource: "'" + resource + "'"}},
		appdb.Options{OwnerRole: c.Owner, RolePrefix: "fg_transfer_", OwnDatabase: true})
	if err != nil {
		return nil, err
	}
	defer app.Close()
	appDSN, err := app.DSN(c.DB)
	if err != nil {
		return nil, fmt.Errorf("-db: %w", err)
	}
	setup, err := pgx.Connect(ctx, app.AdminDSN)
	if err != nil {
		return nil, fmt.Errorf("connect to database %s as the administrator: %w (is fencegate dev running?)", app.Database, err)
	}
	defer setup.Close(context.Background())

	tc, err := tokenclient.NewClient(c.Tokens)
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	locks, err := lockclient.Dial([]string{c.Redis}, tc, lockclient.WithTTL(c.TTL))
	if err != nil {
		return nil, err
	}
	defer locks.Close()

	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, c.Workers)
	for w := 0; w < c.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One connection per worker: a transaction belongs to a connection.
			db, err := pgx.Connect(ctx, appDSN)
			if err != nil {
				errs[w] = fmt.Errorf("connect to the fencegate proxy as %s: %w (is -db the fencegate proxy?)", app.Role, err)
				return
			}
			defer db.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for done := 0; done < c.Transfers; {
				from, to := rng.IntN(len(initial)), rng.IntN(len(initial)-1)
				if to >= from {
					to++
				}
				amount := int64(1 + rng.IntN(3000))
				stall := rng.Float64() < c.Stall
				err := transfer(ctx, locks, db, table, resource, initial[from].Name, initial[to].Name, amount, stall, c.TTL)
				switch {
				case err == nil:
					done++
					mu.Lock()
					res.Committed++
					mu.Unlock()
				case errors.Is(err, lockclient.ErrStaleToken):
					// Another worker took the lock while this one stalled and
					// has written since: nothing of this attempt committed.
					// Take the lock again and redo the transfer from fresh reads.
					mu.Lock()
					res.Stale++
					mu.Unlock()
				default:
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	rows, err := setup.Query(ctx, "SELECT name, cents FROM "+table+" ORDER BY name")
	if err != nil {
		return nil, err
	}
	res.Accounts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[account])
	if err != nil {
		return nil, err
	}
	res.NoneNegative = true
	for _, a := range res.Accounts {
		res.Total += a.Cents
		res.NoneNegative = res.NoneNegative && a.Cents >= 0
	}
	return res, nil
}

// transfer moves amount from one account to another if the first can afford
// it, under the lock. This is the part to copy.
func transfer(ctx context.Context, locks *lockclient.Client, db *pgx.Conn, table, resource, from, to string, amount int64, stall bool, ttl time.Duration) error {
	lock, err := locks.Acquire(ctx, resource)
	if err != nil {
		return fmt.Errorf("acquire %s: %w", resource, err)
	}
	defer lock.Release(context.Background())
	if stall {
		// Preparing the transfer (a fraud check, a GC pause) takes longer
		// than the TTL: another worker may take the lock and write meanwhile.
		time.Sleep(2 * ttl)
	}
	// InTx begins a transaction, runs SELECT fencegate.fence(resource, token)
	// first, then fn, then commits. A stale token fails the fence before fn
	// reads anything, and the whole transaction rolls back.
	return lock.InTx(ctx, db, func(tx pgx.Tx) error {
		var balance int64
		if err := tx.QueryRow(ctx, "SELECT cents FROM "+table+" WHERE name = $1", from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return nil // insufficient funds: nothing to do
		}
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET cents = cents - $1 WHERE name = $2", amount, from); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET cents = cents + $1 WHERE name = $2", amount, to)
		return err
	})
}
