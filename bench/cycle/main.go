// Command cycle measures the whole critical section users run, fenced
// against unfenced: take the lock, (get the fencing token,) run one
// transaction of one UPDATE, release.
//
//   - fenced: lockclient with a 3-node token cluster; Acquire (grant,
//     token, confirm), then Lock.InTx (BEGIN, fencegate.fence, UPDATE of
//     the worker's row of a protected table, COMMIT), then Release;
//   - unfenced: bsm/redislock (one Redis) or go-redsync/redsync (Redlock),
//     then the same transaction without the fence on an unprotected twin
//     table, then the release.
//
// Each worker locks its own resource and updates its own row, so the
// figures measure the cost of a cycle, not contention. The command starts
// what it needs on free loopback ports (redis-server for one node and for
// the masters, three "fencegate token serve" processes, a throwaway
// database with schema fencegate, both tables and an application role) and
// removes all of it on exit.
//
//	go run ./cycle [--runs 3] [--duration 5s] [--concurrency 1,64] [--masters 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

func main() { bench.Main("bench cycle", run) }

type options struct {
	bench.Flags
	pg      string
	masters int
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cycle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	o.Register(fs, []int{1, 64})
	fs.StringVar(&o.pg, "db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"superuser `DSN` of the PostgreSQL server the throwaway database is created on")
	fs.IntVar(&o.masters, "masters", 5, "number of redis-server masters started for Redlock")
	if err := bench.Parse(fs, &o.Flags, args); err != nil {
		return err
	}
	if o.masters < 1 {
		return bench.Usagef("--masters must be at least 1")
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	redis.SetLogger(quietLogger{})

	ws, err := bench.NewWorkspace("fencegate-bench-cycle-", o.Keep, "token data, logs", stderr)
	if err != nil {
		return err
	}
	defer ws.Cleanup.Run()
	fgBin, fgVersion, err := o.Fencegate(ctx, ws.Dir, logf)
	if err != nil {
		return err
	}
	redisBin, err := bench.LookPath("redis-server", "redis-server")
	if err != nil {
		return err
	}

	logf("starting 1 + %d redis-server processes", o.masters)
	single, err := startRedis(ctx, ws.Group, redisBin, 1)
	if err != nil {
		return err
	}
	masters, err := startRedis(ctx, ws.Group, redisBin, o.masters)
	if err != nil {
		return err
	}
	logf("starting 3 fencegate token serve processes")
	tokens, err := startTokens(ctx, ws.Group, fgBin, ws.Dir)
	if err != nil {
		return err
	}
	tc, err := tokenclient.NewClient(tokens.urls)
	if err != nil {
		return err
	}
	defer tc.Close()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = tc.NextToken(wctx, "bench:warmup")
	cancel()
	if err != nil {
		return fmt.Errorf("token cluster did not mint: %w", err)
	}

	maxC := slices.Max(o.Concurrency)
	db, err := prepareDatabase(ctx, o.pg, maxC, ws.Cleanup, logf)
	if err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(db.dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns, pcfg.MinConns = int32(maxC), int32(maxC)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	sideBySide := []pair{}
	for _, mode := range []struct {
		name string
		rs   *redisSet
	}{{"1 Redis", single}, {fmt.Sprintf("Redlock %d", o.masters), masters}} {
		rdbs := newClients(mode.rs.addrs, maxC)
		defer closeAll(rdbs)
		var plain scenario
		if len(rdbs) == 1 {
			plain = bsmScenario(rdbs[0], pool)
		} else {
			plain = redsyncScenario(rdbs, pool)
		}
		fenced, closeFenced, err := fencedScenario(rdbs, tc, pool)
		if err != nil {
			return err
		}
		defer closeFenced()
		sideBySide = append(sideBySide, pair{mode: mode.name, redisPids: mode.rs.pidList(), plain: plain, fenced: fenced})
	}

	rep := &report{opts: o, versions: map[string]string{
		"fencegate":    fgVersion,
		"redis-server": bench.Version(ctx, redisBin, "--version"),
		"postgresql":   db.version,
	}}
	for r := 1; r <= o.Runs; r++ {
		for _, c := range o.Concurrency {
			for pi, p := range sideBySide {
				// Alternate which side runs first, so neither always meets
				// a colder or a hotter machine.
				sides := []*scenario{&p.plain, &p.fenced}
				if (r+pi)%2 == 0 {
					sides[0], sides[1] = sides[1], sides[0]
				}
				for _, s := range sides {
					pids := p.redisPids
					if s == &p.fenced {
						pids = append(slices.Clone(pids), tokens.pids()...)
					}
					m, err := measure(ctx, *s, c, o.Warmup, o.Duration, pids, backendPids(ctx, pool))
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if err != nil {
						return fmt.Errorf("%s, %s, c=%d: %w", p.mode, s.name, c, err)
					}
					logf("run %d  c=%-3d %-10s %-28s %8.0f cycles/s  p50 %-9v p99 %-9v client %v/cycle  servers %v/cycle  steal %.0f%%",
						r, c, p.mode, s.name, m.PerSec, round(m.P50), round(m.P99), round(m.clientCPU), round(m.serverCPU), 100*m.steal)
					rep.add(p.mode, s.name, s == &p.fenced, c, m)
					if c == 1 {
						rep.addSteps(p.mode, s.name, s.steps)
					}
				}
			}
		}
	}
	return rep.write(stdout)
}

// pair is the unfenced and the fenced cycle over one set of Redis servers.
type pair struct {
	mode          string
	redisPids     []int
	plain, fenced scenario
}

// redisSet is redis-server processes started for the run.
type redisSet struct {
	addrs []string
	procs []*proc.Proc
}

func (s *redisSet) pidList() []int {
	var out []int
	for _, p := range s.procs {
		out = append(out, p.Pid())
	}
	return out
}

// startRedis starts n redis-server processes without persistence under g.
func startRedis(ctx context.Context, g *proc.Group, bin string, n int) (*redisSet, error) {
	addrs, err := freeport.Loopback(n)
	if err != nil {
		return nil, err
	}
	s := &redisSet{addrs: addrs}
	for _, a := range addrs {
		p, err := g.Start("redis-server-"+a, bin, servers.RedisArgs(a))
		if err != nil {
			return nil, err
		}
		opts := &redis.Options{Addr: a}
		if err := p.WaitReady(ctx, 20*time.Millisecond, 15*time.Second,
			func(ctx context.Context) error { return servers.PingRedis(ctx, opts) }); err != nil {
			return nil, err
		}
		s.procs = append(s.procs, p)
	}
	return s, nil
}

// tokenCluster is three "fencegate token serve" processes on loopback.
type tokenCluster struct {
	urls  []string
	procs []*proc.Proc
}

func (c *tokenCluster) pids() []int {
	var out []int
	for _, p := range c.procs {
		out = append(out, p.Pid())
	}
	return out
}

// startTokens starts a three-node token cluster (fsync on, as always) with
// data under dir and waits until every node is ready.
func startTokens(ctx context.Context, g *proc.Group, bin, dir string) (*tokenCluster, error) {
	ports, err := freeport.Ports(6)
	if err != nil {
		return nil, err
	}
	c := &tokenCluster{}
	var peers []string
	for i := range 3 {
		id := "n" + strconv.Itoa(i+1)
		c.urls = append(c.urls, "http://127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
		peers = append(peers, id+"=127.0.0.1:"+strconv.Itoa(ports[2*i])+"="+c.urls[i])
	}
	for i := range 3 {
		id := "n" + strconv.Itoa(i+1)
		data := filepath.Join(dir, id)
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, fmt.Errorf("create data dir: %w", err)
		}
		p, err := g.Start("fencegate-"+id, bin, []string{"token", "serve",
			"--id", id, "--data-dir", data,
			"--raft-addr", "127.0.0.1:" + strconv.Itoa(ports[2*i]),
			"--api-addr", "127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			"--peers", strings.Join(peers, ","), "--log-level", "warn"})
		if err != nil {
			return nil, err
		}
		c.procs = append(c.procs, p)
	}
	for i, p := range c.procs {
		url := c.urls[i] + "/readyz"
		if err := p.WaitReady(ctx, 20*time.Millisecond, 60*time.Second, func(ctx context.Context) error {
			return httpOK(ctx, url)
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// database is the throwaway database the cycles write to.
type database struct {
	dsn     string // as the application role
	version string
}

// The tables: one row per worker, the same rows in both. fencedTable is
// protected with resource 'cycle:' || id; plainTable is its unprotected
// twin.
const (
	fencedTable = "cycle_fenced"
	plainTable  = "cycle_plain"
)

func resourceOf(worker int) string { return "cycle:" + strconv.Itoa(worker+1) }

// prepareDatabase creates the database, the roles, schema fencegate and
// both tables with rows for n workers; cl drops them all at the end.
func prepareDatabase(ctx context.Context, adminDSN string, n int, cl *bench.Cleanup, logf func(string, ...any)) (*database, error) {
	name := pgdb.RandomName("fg_bench_cycle_")
	app := "fg_bench_cycle_app_" + pgdb.RandomHex(4)
	owner := "fg_bench_cycle_owner_" + pgdb.RandomHex(4)
	cl.Add(func() {
		if err := pgdb.DropRoles(context.Background(), adminDSN, []string{name}, app, owner); err != nil {
			logf("%v", err)
		}
	})
	dsn, err := pgdb.Create(ctx, adminDSN, name)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL at %s (is it running? make services starts it): %w", adminDSN, err)
	}
	cl.Add(func() {
		if err := pgdb.Drop(context.Background(), adminDSN, name); err != nil {
			logf("%v", err)
		}
	})
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	logf("installing schema fencegate in %s, protecting %s, creating role %s", name, fencedTable, app)
	d, err := fenceddb.Setup(ctx, conn, fenceddb.Options{Owner: owner, App: app})
	if err != nil {
		return nil, err
	}
	for _, t := range []fenceddb.Table{
		{Name: fencedTable, Resource: "'cycle:' || id", ToOwner: true},
		{Name: plainTable, ToOwner: true},
	} {
		if _, err := conn.Exec(ctx, "CREATE TABLE "+t.Name+" (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0)"); err != nil {
			return nil, err
		}
		if _, err := conn.Exec(ctx, "INSERT INTO "+t.Name+" (id) SELECT generate_series(1, $1::int)", n); err != nil {
			return nil, err
		}
		if err := d.Protect(ctx, conn, t); err != nil {
			return nil, err
		}
	}
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return nil, err
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, err
	}
	u.User = url.User(app) // trust authentication on loopback, as the other commands assume
	return &database{dsn: u.String(), version: "PostgreSQL " + version}, nil
}

// quietLogger drops go-redis's own log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
