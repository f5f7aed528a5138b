// Command fenced-transfer moves money between accounts under a lock, the way
// a correctness-critical job should: every transfer takes the Redis lock and
// its fencing token with lockclient, and does its reads and writes in one
// transaction through the fencegate proxy that starts with the fence. The
// accounts table is protected by fencegate (the whole table is one
// resource, 'bank:accounts'), so PostgreSQL refuses any write to it that
// is not fenced with the lock's resource. A worker whose lock expired while
// it stalled gets lockclient.ErrStaleToken instead of overwriting someone
// else's balances, and retries.
//
// The administrator's part comes first, once: setup.sql creates the table
// and grants the application role its rows, and "fencegate protect" protects
// it (README.md has the commands). The program itself connects as the
// application role only, through the proxy (-db).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
)

// resource is the resource the whole accounts table belongs to: its
// resource expression is the constant 'bank:accounts' (fencegate protect
// accounts --resource "'bank:accounts'").
const resource = "bank:accounts"

type config struct {
	DB, Redis string
	Tokens    []string
	Workers   int
	Transfers int // per worker
	TTL       time.Duration
	Stall     float64 // probability that a worker stalls past the TTL before its transaction
}

func main() {
	var c config
	flag.StringVar(&c.DB, "db", os.Getenv("DATABASE_URL"), "the application role's DSN through the fencegate proxy, as 'fencegate dev' prints it (default $DATABASE_URL)")
	flag.StringVar(&c.Redis, "redis", "127.0.0.1:6379", "Redis host:port")
	tokens := flag.String("tokens", "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103", "token service URLs")
	flag.IntVar(&c.Workers, "workers", 4, "concurrent workers")
	flag.IntVar(&c.Transfers, "transfers", 25, "transfers per worker")
	flag.DurationVar(&c.TTL, "ttl", 300*time.Millisecond, "lock TTL")
	flag.Float64Var(&c.Stall, "stall", 0.1, "chance that a worker stalls past the TTL between taking the lock and its transaction")
	flag.Parse()
	if c.DB == "" {
		log.Fatal("-db: give the application role's DSN through the proxy ('fencegate dev' prints it)")
	}
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

func run(ctx context.Context, c config) (*result, error) {
	res := &result{}
	read, err := pgx.Connect(ctx, c.DB)
	if err != nil {
		return nil, fmt.Errorf("connect to the fencegate proxy: %w (is -db the proxy DSN 'fencegate dev' printed?)", err)
	}
	defer read.Close(context.Background())
	accounts, err := balances(ctx, read)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(accounts))
	for i, a := range accounts {
		names[i] = a.Name
		res.Initial += a.Cents
	}

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
			db, err := pgx.Connect(ctx, c.DB)
			if err != nil {
				errs[w] = fmt.Errorf("connect to the fencegate proxy: %w", err)
				return
			}
			defer db.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			for done := 0; done < c.Transfers; {
				from, to := rng.IntN(len(names)), rng.IntN(len(names)-1)
				if to >= from {
					to++
				}
				amount := int64(1 + rng.IntN(3000))
				stall := rng.Float64() < c.Stall
				err := transfer(ctx, locks, db, names[from], names[to], amount, stall, c.TTL)
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

	if res.Accounts, err = balances(ctx, read); err != nil {
		return nil, err
	}
	res.NoneNegative = true
	for _, a := range res.Accounts {
		res.Total += a.Cents
		res.NoneNegative = res.NoneNegative && a.Cents >= 0
	}
	return res, nil
}

// balances reads every account.
func balances(ctx context.Context, db *pgx.Conn) ([]account, error) {
	rows, err := db.Query(ctx, "SELECT name, cents FROM accounts ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("read the accounts: %w (did setup.sql and 'fencegate protect' run? see README.md)", err)
	}
	accounts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[account])
	if err == nil && len(accounts) < 2 {
		err = errors.New("fewer than two accounts: run setup.sql (see README.md)")
	}
	return accounts, err
}

// transfer moves amount from one account to another if the first can afford
// it, under the lock. This is the part to copy.
func transfer(ctx context.Context, locks *lockclient.Client, db *pgx.Conn, from, to string, amount int64, stall bool, ttl time.Duration) error {
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
		if err := tx.QueryRow(ctx, "SELECT cents FROM accounts WHERE name = $1", from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return nil // insufficient funds: nothing to do
		}
		if _, err := tx.Exec(ctx, "UPDATE accounts SET cents = cents - $1 WHERE name = $2", amount, from); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE accounts SET cents = cents + $1 WHERE name = $2", amount, to)
		return err
	})
}
