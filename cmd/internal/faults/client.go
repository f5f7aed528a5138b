package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
)

// ClientConfig is the workload of one client process.
type ClientConfig struct {
	ID       string        // the client's name in the history, e.g. "c1"
	Tokens   []string      // token service API URLs
	Redis    []string      // Redis masters: one (single node) or several (Redlock)
	DSNs     []string      // the database through each proxy; used in turn
	Resource string        // the locked and fenced resource
	TTL      time.Duration // lock TTL
	Work     time.Duration // the most a client waits between token and write
	Seed     int64         // seeds the client's random work times
	Logger   *slog.Logger  `json:"-"`
}

// RunClient runs the workload until ctx ends, writing its events to w as
// JSON lines: take the lock (and its token), "work" a little, then run a
// fenced read-modify-write transaction through a proxy: read the counter,
// write it plus one, and insert the increment's row. It does not check the
// lock again before writing: a check cannot close the window between check
// and write, and the campaign is about what the fence does in that window.
func RunClient(ctx context.Context, cfg ClientConfig, w io.Writer) error {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("component", "faults-client", "client", cfg.ID)
	rec := NewRecorder(w, false)
	ts, err := tokenclient.NewClient(cfg.Tokens)
	if err != nil {
		return fmt.Errorf("create token client: %w", err)
	}
	defer ts.Close()
	c := &client{cfg: cfg, rec: rec, log: log, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x636c69656e74))}
	lc, err := lockclient.Dial(cfg.Redis, &recordingTokens{c: c, src: ts},
		lockclient.WithTTL(cfg.TTL),
		lockclient.WithRetry(lockclient.FixedRetry(cfg.TTL/20)),
		lockclient.WithAutoRefresh(0),
		lockclient.WithLogger(log))
	if err != nil {
		return fmt.Errorf("create lock client: %w", err)
	}
	defer lc.Close()
	c.conns = make([]*pgx.Conn, len(cfg.DSNs))
	defer func() {
		for _, conn := range c.conns {
			if conn != nil {
				conn.Close(context.Background())
			}
		}
	}()
	for ctx.Err() == nil {
		c.op++
		c.once(ctx, lc)
		// A short random rest after each release lets the other clients,
		// which retry every TTL/20, take their turns.
		if c.cfg.Work > 0 {
			poll.Sleep(ctx, time.Duration(c.rng.Int64N(int64(c.cfg.Work))))
		}
	}
	return nil
}

type client struct {
	cfg   ClientConfig
	rec   *Recorder
	log   *slog.Logger
	rng   *rand.Rand
	op    int64
	conns []*pgx.Conn
}

func (c *client) record(e worker.Event) {
	e.Client, e.Op, e.Resource = c.cfg.ID, c.op, c.cfg.Resource
	if err := c.rec.Record(e); err != nil {
		c.log.Error("record event", "err", err)
	}
}

// recordingTokens records every token request of the lock client.
type recordingTokens struct {
	c   *client
	src lockclient.TokenSource
}

func (r *recordingTokens) NextToken(ctx context.Context, resource string) (int64, error) {
	r.c.record(worker.Event{Kind: KindTokenCall})
	t, err := r.src.NextToken(ctx, resource)
	if err != nil {
		r.c.record(worker.Event{Kind: KindTokenFail, Err: err.Error()})
		return 0, err
	}
	r.c.record(worker.Event{Kind: KindTokenOK, Token: t})
	return t, nil
}

func (c *client) once(ctx context.Context, lc *lockclient.Client) {
	c.record(worker.Event{Kind: KindAcquireCall})
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	lock, err := lc.Acquire(actx, c.cfg.Resource)
	cancel()
	if err != nil {
		c.record(worker.Event{Kind: KindAcquireFail, Err: err.Error()})
		poll.Sleep(ctx, c.cfg.TTL/10)
		return
	}
	var work time.Duration
	if c.cfg.Work > 0 {
		work = time.Duration(c.rng.Int64N(int64(c.cfg.Work)))
	}
	c.record(worker.Event{Kind: KindAcquireOK, Token: lock.Token(), Work: int64(work),
		Detail: "valid " + time.Until(lock.ValidUntil()).Round(time.Millisecond).String()})
	defer func() {
		c.record(worker.Event{Kind: KindRelease})
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = lock.Release(rctx)
		cancel()
	}()
	poll.Sleep(ctx, work)
	c.txn(ctx, lock)
}

func (c *client) conn(ctx context.Context) (*pgx.Conn, int, error) {
	i := int(c.op) % len(c.cfg.DSNs)
	if c.conns[i] != nil && !c.conns[i].IsClosed() {
		return c.conns[i], i, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, c.cfg.DSNs[i])
	if err != nil {
		return nil, i, fmt.Errorf("connect to proxy %d: %w", i+1, err)
	}
	c.conns[i] = conn
	return conn, i, nil
}

func (c *client) dropConn(i int) {
	if c.conns[i] != nil {
		c.conns[i].Close(context.Background())
		c.conns[i] = nil
	}
}

func (c *client) txn(ctx context.Context, lock *lockclient.Lock) {
	token := lock.Token()
	c.record(worker.Event{Kind: KindTxnCall, Token: token})
	conn, i, err := c.conn(ctx)
	if err != nil {
		c.record(worker.Event{Kind: KindTxnFail, Token: token, Detail: DetailAborted, Err: err.Error()})
		return
	}
	// The transaction has its own deadline, not the run's: a client stopped
	// at the end of a run finishes (or fails) the transaction it is in.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var prev int64
	bodyDone := false
	err = lock.InTx(tctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(tctx, "SELECT value FROM counter WHERE id = 1").Scan(&prev); err != nil {
			return fmt.Errorf("read counter: %w", err)
		}
		if _, err := tx.Exec(tctx, "UPDATE counter SET value = $1 WHERE id = 1", prev+1); err != nil {
			return fmt.Errorf("write counter: %w", err)
		}
		if _, err := tx.Exec(tctx, "INSERT INTO increments (client, op, token, prev) VALUES ($1, $2, $3, $4)",
			c.cfg.ID, c.op, token, prev); err != nil {
			return fmt.Errorf("insert increment: %w", err)
		}
		// The increment's call to the provider, sent by the relay once
		// this transaction commits (checkEffects).
		if _, err := lock.Effect(tctx, tx, EffectTarget, map[string]any{"client": c.cfg.ID, "op": c.op, "token": token}); err != nil {
			return fmt.Errorf("record effect: %w", err)
		}
		bodyDone = true
		return nil
	})
	switch {
	case err == nil:
		c.record(worker.Event{Kind: KindTxnOK, Token: token, Value: prev})
	case errors.Is(err, lockclient.ErrStaleToken):
		c.record(worker.Event{Kind: KindTxnStale, Token: token, Err: err.Error()})
	default:
		detail := DetailAborted
		if bodyDone {
			// The failure came at COMMIT: it may have committed.
			detail = DetailUnknown
		}
		c.record(worker.Event{Kind: KindTxnFail, Token: token, Detail: detail, Err: err.Error()})
		c.dropConn(i)
	}
}
