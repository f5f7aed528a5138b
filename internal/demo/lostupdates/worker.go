package lostupdates

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencegate/fencegate/internal/demo"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// workerConfig is what a worker process needs; the parent passes it as JSON
// in the environment variable workerEnv.
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

const workerEnv = "LOST_UPDATES_WORKER"

// record is one line a worker reports on stdout.
type record struct {
	Ev       string `json:"ev"` // "acq", "write", "rel"
	At       int64  `json:"at"` // Unix nanoseconds
	Token    int64  `json:"tok,omitempty"`
	Attempt  int    `json:"att,omitempty"`
	OK       bool   `json:"ok,omitempty"`
	Value    int64  `json:"val,omitempty"` // the value written
	SQLState string `json:"code,omitempty"`
	Err      string `json:"err,omitempty"`
}

// runWorker increments the counter cfg.N times, each time under the lock:
// take the lock (and its fencing token), prepare a little, then in one
// transaction read the counter, work a little, write counter+1; release. It is a read-modify-write that is only correct
// if no one else writes between the read and the write.
//
// It reports "ready" once connected, and starts when a line arrives on in, so
// that slow process starts do not eat into the run.
func runWorker(ctx context.Context, cfg workerConfig, in io.Reader, out io.Writer) error {
	enc := json.NewEncoder(out)
	emit := func(r record) { r.At = time.Now().UnixNano(); _ = enc.Encode(r) }

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
	emit(record{Ev: "ready"})
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
		emit(record{Ev: "acq", Token: lock.Token()})
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
			emit(record{Ev: "write", Token: lock.Token(), Attempt: attempt, OK: true, Value: value})
		case errors.As(err, &pgErr):
			emit(record{Ev: "write", Token: lock.Token(), Attempt: attempt, SQLState: pgErr.Code, Err: pgErr.Message})
		default:
			return fmt.Errorf("increment: %w", err)
		}
		// The belief ends when the release starts: stamp it before the lock
		// is free for the next worker.
		rel := record{Ev: "rel", Token: lock.Token(), At: time.Now().UnixNano()}
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lock.Release(rctx)
		cancel()
		_ = enc.Encode(rel)
	}
	return nil
}

// WorkerMain runs this process as a worker, and exits, when the parent
// asked for one (in its environment); otherwise it returns false. A
// program that runs Run calls it first.
func WorkerMain() bool {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		return false
	}
	var cfg workerConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "lost-updates worker: bad %s: %v\n", workerEnv, err)
		os.Exit(2)
	}
	if err := runWorker(context.Background(), cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "lost-updates worker %d: %v\n", cfg.ID, err)
		os.Exit(1)
	}
	os.Exit(0)
	return true
}
