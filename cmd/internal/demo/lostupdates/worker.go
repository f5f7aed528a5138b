package lostupdates

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/demo"
	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// workerConfig is what a worker process needs; the parent passes it as
// worker.Env does.
type workerConfig struct {
	ID       int           `json:"id"`
	N        int           `json:"n"`        // increments to make
	Duration time.Duration `json:"duration"` // how long to run once started
	DB       string        `json:"db"`       // PostgreSQL, or the proxy
	Fenced   bool          `json:"fenced"`   // fence each transaction with the token
	Redis    []string      `json:"redis"`
	Tokens   []string      `json:"tokens"`
	Resource string        `json:"resource"`
	TTL      time.Duration `json:"ttl"`
	Prep     time.Duration `json:"prep"` // between taking the lock and the transaction
	Work     time.Duration `json:"work"` // between the read and the write
}

// runWorker increments the counter cfg.N times, each time under the lock:
// take the lock (and its fencing token), prepare a little, then in one
// transaction read the counter, work a little, write counter+1; release. It is a read-modify-write that is only correct
// if no one else writes between the read and the write.
//
// It reports "ready" once connected, and starts when a line arrives on in, so
// that slow process starts do not eat into the run.
func runWorker(ctx context.Context, cfg workerConfig, in io.Reader, out io.Writer) error {
	enc := worker.NewWriter(out)
	// Each line on stdout is a worker.Event: Kind is "ready", "acq",
	// "write" or "rel"; Time is Unix nanoseconds; a write has Attempt, OK and
	// Value, or SQLState and Err.
	emit := func(r worker.Event) { r.Time = time.Now().UnixNano(); _ = enc.Send(r) }

	conn, err := pgx.Connect(ctx, cfg.DB)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.Background())
	locks, err := demo.DialLocks(cfg.Redis, cfg.Tokens, lockclient.WithTTL(cfg.TTL),
		lockclient.WithRetry(lockclient.FixedRetry(4*time.Millisecond)))
	if err != nil {
		return err
	}
	defer locks.Close()
	emit(worker.Event{Kind: "ready"})
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return fmt.Errorf("wait for start: %w", err)
	}
	deadline := time.Now().Add(cfg.Duration)

	done, attempt := 0, 0
	for done < cfg.N && time.Now().Before(deadline) {
		actx, cancel := context.WithDeadline(ctx, deadline)
		lock, err := locks.Acquire(actx, cfg.Resource)
		cancel()
		if err != nil {
			if time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			return fmt.Errorf("acquire: %w", err)
		}
		emit(worker.Event{Kind: "acq", Token: lock.Token()})
		attempt++
		time.Sleep(cfg.Prep)
		var value int64
		inc := func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, "SELECT v FROM counter WHERE id = 1").Scan(&value); err != nil {
				return err
			}
			time.Sleep(cfg.Work)
			value++
			if _, err := tx.Exec(ctx, "UPDATE counter SET v = $1 WHERE id = 1", value); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO increments(worker, attempt, token, value) VALUES ($1, $2, $3, $4)",
				cfg.ID, attempt, lock.Token(), value)
			return err
		}
		if cfg.Fenced {
			err = lock.InTx(ctx, conn, inc)
		} else {
			err = pgx.BeginFunc(ctx, conn, inc)
		}
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			done++
			emit(worker.Event{Kind: "write", Token: lock.Token(), Attempt: attempt, OK: true, Value: value})
		case errors.As(err, &pgErr):
			emit(worker.Event{Kind: "write", Token: lock.Token(), Attempt: attempt, SQLState: pgErr.Code, Err: pgErr.Message})
		default:
			return fmt.Errorf("increment: %w", err)
		}
		// The belief ends when the release starts: stamp it before the lock
		// is free for the next worker.
		rel := worker.Event{Kind: "rel", Token: lock.Token(), Time: time.Now().UnixNano()}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lock.Release(rctx)
		cancel()
		_ = enc.Send(rel)
	}
	return nil
}

// RunWorker is the body of a worker process (worker.LostUpdates): it reads
// its configuration from the environment, takes the go-ahead on stdin and
// reports on stdout.
func RunWorker(ctx context.Context) error {
	var cfg workerConfig
	if err := worker.ReadConfig(&cfg); err != nil {
		return err
	}
	if err := runWorker(ctx, cfg, os.Stdin, os.Stdout); err != nil {
		return fmt.Errorf("lost-updates worker %d: %w", cfg.ID, err)
	}
	return nil
}

// WorkerMain runs this process as a worker, and exits, when its command
// line asks for one; otherwise it returns false. A test program that runs
// Run with itself as the binary calls it first.
func WorkerMain() bool {
	if len(os.Args) < 3 || os.Args[1] != worker.Command || os.Args[2] != worker.LostUpdates {
		return false
	}
	if err := RunWorker(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
