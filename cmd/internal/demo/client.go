package demo

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ClientConfig is what one client process needs.
type ClientConfig struct {
	Name      string        // "client 1"
	Redis     []string      // one address, or five for Redlock
	Tokens    []string      // token service API URLs
	DB        string        // DSN: PostgreSQL directly, or the proxy
	Password  string        `json:"-"` // the DSN's password; passed in PGPASSWORD, never in the configuration
	Fenced    bool          // take fencegate.fence in each transaction
	Resource  string        // the lock and fence resource, e.g. "order:42"
	KeyPrefix string        // prefix of the lock's key in Redis
	OrderID   int           // the order to charge
	TTL       time.Duration // lock TTL
	Wait      time.Duration // how long Acquire may keep retrying
	Work      time.Duration // time spent between reading and writing
}

// RunClient is the body of the demo's client process (worker.DemoClient): take the lock and a
// token, read the order, wait for the demo's go-ahead on stdin (the demo may
// freeze this process meanwhile), check the lease once more, charge the order
// if it looked unpaid, release. Progress goes to stdout as JSON lines.
func RunClient(ctx context.Context, c *ClientConfig, stdin io.Reader, stdout io.Writer) error {
	ev := eventWriter{worker.NewWriter(stdout)}
	err := runClient(ctx, c, bufio.NewReader(stdin), ev)
	if err != nil {
		ev.send(worker.Event{Kind: evFailed, Err: err.Error()})
	}
	return err
}

func runClient(ctx context.Context, c *ClientConfig, stdin *bufio.Reader, ev eventWriter) error {
	if len(c.Redis) == 0 || len(c.Tokens) == 0 || c.DB == "" {
		return errors.New("demo client: Redis, Tokens and DB are required")
	}
	conn, err := pgx.Connect(ctx, c.DB)
	if err != nil {
		return fmt.Errorf("connect %s: %w", c.DB, err) // no password in c.DB: it is in PGPASSWORD
	}
	defer conn.Close(context.Background())

	locks, err := DialLocks(c.Redis, c.Tokens, lockclient.WithTTL(c.TTL), lockclient.WithKeyPrefix(c.KeyPrefix),
		lockclient.WithRetry(lockclient.FixedRetry(20*time.Millisecond)))
	if err != nil {
		return err
	}
	defer locks.Close()
	actx, cancel := context.WithTimeout(ctx, c.Wait)
	lock, err := locks.Acquire(actx, c.Resource)
	cancel()
	if err != nil {
		return fmt.Errorf("acquire %s: %w", c.Resource, err)
	}
	ev.send(worker.Event{Kind: evAcquired, Token: lock.Token(), TTLMillis: c.TTL.Milliseconds()})

	var state string
	err = c.tx(ctx, conn, lock, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT state FROM orders WHERE id = $1", c.OrderID).Scan(&state)
	})
	if err != nil {
		return fmt.Errorf("read order %d: %w", c.OrderID, err)
	}
	ev.send(worker.Event{Kind: evRead, State: state})

	// Work on it (call the card processor, say), then, as a careful client
	// does, check the lease right before writing. It does not help: the
	// pause can fall between this check and the write.
	select {
	case <-time.After(c.Work):
	case <-ctx.Done():
		return ctx.Err()
	}
	ev.send(worker.Event{Kind: evChecked, Held: held(lock)})
	// The go-ahead. The demo may SIGSTOP this process before sending it:
	// this wait is where the "GC pause" lands.
	line, err := stdin.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != cmdWrite {
		return fmt.Errorf("wait for go-ahead: got %q, %v", line, err)
	}
	if state != "unpaid" {
		ev.send(worker.Event{Kind: evSkipped, State: state})
	} else {
		err = c.tx(ctx, conn, lock, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO charges(order_id, amount_cents, by_client, token)
				SELECT id, amount_cents, $2, $3 FROM orders WHERE id = $1`, c.OrderID, c.Name, lock.Token()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE orders SET state = 'paid' WHERE id = $1", c.OrderID)
			return err
		})
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			ev.send(worker.Event{Kind: evWrote, OK: true})
		case errors.As(err, &pgErr):
			ev.send(worker.Event{Kind: evWrote, SQLState: pgErr.Code, Err: pgErr.Message})
		default:
			return fmt.Errorf("charge order %d: %w", c.OrderID, err)
		}
	}
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = lock.Release(rctx)
	ev.send(worker.Event{Kind: evReleased})
	return nil
}

// tx runs fn in a transaction, fenced with the lock's token when c.Fenced:
// lockclient's InTx runs SELECT fencegate.fence(resource, token) first.
func (c *ClientConfig) tx(ctx context.Context, conn *pgx.Conn, lock *lockclient.Lock, fn func(pgx.Tx) error) error {
	if c.Fenced {
		return lock.InTx(ctx, conn, fn)
	}
	return pgx.BeginFunc(ctx, conn, fn)
}
