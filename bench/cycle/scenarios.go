package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/cputime"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// cycleFunc runs one whole cycle for worker w.
type cycleFunc func(ctx context.Context, w int) error

// scenario is one way of running the critical section.
type scenario struct {
	name  string
	cycle cycleFunc
	steps *steps
}

const benchTTL = 10 * time.Second

// The transaction's one statement, the same on both tables.
const updateSQL = "UPDATE %s SET n = n + 1 WHERE id = $1"

var (
	updateFenced = fmt.Sprintf(updateSQL, fencedTable)
	updatePlain  = fmt.Sprintf(updateSQL, plainTable)
)

// newClients opens one go-redis client per address, with pools sized for
// the highest concurrency measured. Both sides get the same.
func newClients(addrs []string, conc int) []redis.UniversalClient {
	var out []redis.UniversalClient
	for _, a := range addrs {
		out = append(out, redis.NewClient(&redis.Options{
			Addr: a, PoolSize: max(conc*2, 32), MinIdleConns: conc,
			DisableIdentity: true, MaxRetries: -1, ContextTimeoutEnabled: true,
		}))
	}
	return out
}

func closeAll(cs []redis.UniversalClient) {
	for _, c := range cs {
		c.Close()
	}
}

// plainTx is the unfenced transaction: BEGIN, the UPDATE on the
// unprotected twin, COMMIT.
func plainTx(ctx context.Context, pool *pgxpool.Pool, w int, sw *stopwatch) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	sw.lap("BEGIN")
	if err := exec1(ctx, tx, updatePlain, w); err != nil {
		tx.Rollback(ctx) //nolint:errcheck
		return err
	}
	sw.lap("UPDATE")
	err = tx.Commit(ctx)
	sw.lap("COMMIT")
	return err
}

func exec1(ctx context.Context, tx pgx.Tx, sql string, w int) error {
	tag, err := tx.Exec(ctx, sql, w+1)
	if err == nil && tag.RowsAffected() != 1 {
		err = fmt.Errorf("updated %d rows, want 1", tag.RowsAffected())
	}
	return err
}

func bsmScenario(rdb redis.UniversalClient, pool *pgxpool.Pool) scenario {
	c := redislock.New(rdb)
	st := &steps{}
	return scenario{name: "bsm/redislock, no fence", steps: st, cycle: func(ctx context.Context, w int) error {
		sw := st.start()
		l, err := c.Obtain(ctx, "bench:cycle:bsm:"+resourceOf(w), benchTTL, nil)
		if err != nil {
			return err
		}
		sw.lap("grant")
		err = plainTx(ctx, pool, w, &sw)
		err = errors.Join(err, l.Release(ctx))
		sw.lap("release")
		return err
	}}
}

func redsyncScenario(rdbs []redis.UniversalClient, pool *pgxpool.Pool) scenario {
	var pools []rsredis.Pool
	for _, r := range rdbs {
		pools = append(pools, goredis.NewPool(r))
	}
	rs := redsync.New(pools...)
	st := &steps{}
	return scenario{name: "redsync, no fence", steps: st, cycle: func(ctx context.Context, w int) error {
		sw := st.start()
		m := rs.NewMutex("bench:cycle:redsync:"+resourceOf(w), redsync.WithExpiry(benchTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		sw.lap("grant")
		err := plainTx(ctx, pool, w, &sw)
		ok, uerr := m.UnlockContext(ctx)
		if uerr == nil && !ok {
			uerr = errors.New("redsync: unlock refused")
		}
		sw.lap("release")
		return errors.Join(err, uerr)
	}}
}

// fencedScenario is the cycle the lockclient documentation tells users to
// run: Acquire, InTx under the lock's context, Release.
func fencedScenario(rdbs []redis.UniversalClient, tokens lockclient.TokenSource, pool *pgxpool.Pool) (scenario, func(), error) {
	c, err := lockclient.New(rdbs, timedTokens{tokens}, lockclient.WithTTL(benchTTL), lockclient.WithRetry(lockclient.NoRetry()),
		lockclient.WithKeyPrefix("bench:cycle:lockclient:"), lockclient.WithNodeTimeout(time.Second))
	if err != nil {
		return scenario{}, nil, err
	}
	st := &steps{}
	return scenario{name: "lockclient + token + fence", steps: st, cycle: func(ctx context.Context, w int) error {
		sw := st.start()
		l, err := c.Acquire(withWatch(ctx, &sw), resourceOf(w))
		if err != nil {
			return err
		}
		sw.lap("confirm")
		err = l.InTx(l.Context(), pool, func(tx pgx.Tx) error {
			sw.lap("BEGIN")
			err := exec1(ctx, tx, updateFenced, w)
			sw.lap("UPDATE")
			return err
		})
		sw.lap("COMMIT")
		err = errors.Join(err, l.Release(ctx))
		sw.lap("release")
		return err
	}}, func() { c.Close() }, nil
}

// measurement is one measured run of one scenario at one concurrency.
type measurement struct {
	bench.Result
	clientCPU  time.Duration // this process, per cycle
	serverCPU  time.Duration // the Redis (and token) servers, per cycle
	pgCPU      time.Duration // the benchmark database's PostgreSQL backends, per cycle
	machineCPU time.Duration // every CPU of the machine, per cycle
	steal      float64
}

// measure warms s up at concurrency c, then runs it for d, reading the CPU
// time of this process, of the server processes pids and of the machine
// around the measured part, and of the PostgreSQL backends pgPids when
// PostgreSQL runs on this machine. At one worker the measured run also
// records the steps of each cycle (s.steps). A failed cycle fails the run:
// both sides must complete every cycle for the comparison to mean anything.
func measure(ctx context.Context, s scenario, c int, warmup, d time.Duration, pids, pgPids []int) (measurement, error) {
	if warmup > 0 {
		if _, err := bench.RunClosed(ctx, c, warmup, bench.Op(s.cycle)); err != nil {
			return measurement{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	if c == 1 && s.steps != nil {
		s.steps.record(true)
		defer s.steps.record(false)
	}
	self0, err0 := cputime.ProcessCPU(os.Getpid())
	srv0, err1 := cputime.ProcessCPU(pids...)
	mach0, err2 := cputime.ReadMachineCPU()
	pg0, pgErr0 := cputime.ProcessCPU(pgPids...)
	res, err := bench.RunClosed(ctx, c, d, bench.Op(s.cycle))
	self1, err3 := cputime.ProcessCPU(os.Getpid())
	srv1, err4 := cputime.ProcessCPU(pids...)
	mach1, err5 := cputime.ReadMachineCPU()
	pg1, pgErr1 := cputime.ProcessCPU(pgPids...)
	if err != nil {
		return measurement{}, err
	}
	m := measurement{Result: res}
	if cerr := errors.Join(err0, err1, err2, err3, err4, err5); cerr == nil && res.Ops > 0 {
		n := time.Duration(res.Ops)
		mach := mach1.Sub(mach0)
		m.clientCPU, m.serverCPU, m.machineCPU = (self1-self0)/n, (srv1-srv0)/n, mach.Busy/n
		m.steal = mach.StealShare()
		if len(pgPids) > 0 && pgErr0 == nil && pgErr1 == nil {
			m.pgCPU = (pg1 - pg0) / n
		}
	}
	return m, nil
}

// backendPids returns the process ids of the PostgreSQL backends connected
// to the pool's database, or nil when they are not processes of this
// machine (PostgreSQL elsewhere) or cannot be listed.
func backendPids(ctx context.Context, pool *pgxpool.Pool) []int {
	switch h := pool.Config().ConnConfig.Host; {
	case h == "127.0.0.1", h == "::1", h == "localhost", strings.HasPrefix(h, "/"):
	default:
		return nil
	}
	rows, err := pool.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	var out []int
	for _, p := range pids {
		out = append(out, int(p))
	}
	if _, err := cputime.ProcessCPU(out...); err != nil {
		return nil
	}
	return out
}

// httpOK succeeds when GET url answers 200.
func httpOK(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
