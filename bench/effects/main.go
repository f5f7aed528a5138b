// Command effects sets fencegate's relay beside a plain transactional outbox
// relay doing the same work, in one run: applications record calls in
// their transactions, a relay POSTs them to a loopback HTTP provider.
//
//	go run ./effects [--db DSN] [--effects 3000] [--rate 200] [--seconds 5]
//
// fencegate: each transaction fences its resource and calls
// fencegate.effect; package relay (in this process) claims the oldest
// pending effect of each resource, so one resource's effects go one at a
// time, in commit order. Plain outbox: each transaction INSERTs into an
// unfenced outbox table and notifies; a relay loop (FOR UPDATE SKIP LOCKED
// over pgx, batches of 16, four workers, the same wake-up by NOTIFY) sends
// any pending rows, in no particular order. Both relays keep up to 64
// requests in flight.
//
// Throughput: --effects effects are committed first, then the relay starts
// and drains them: effects/s, and the CPU time this process (relay and
// provider; the provider is the same on both sides) spent per effect.
// Latency: producers commit --rate effects/s in all for --seconds seconds
// while the relay runs; from the producer's COMMIT returning to the
// provider receiving the request, p50 and p99. Both at 1 and at 64
// resources. It creates a throwaway database on the server of --db (a
// superuser DSN) and drops it when it ends.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/relay"
	"github.com/jackc/pgx/v5"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "effects:", err)
		os.Exit(1)
	}
}

// provider counts the requests per key and the latency from each
// payload's commit.
type provider struct {
	mu        sync.Mutex
	seen      map[string]bool
	committed map[int64]time.Time
	lat       []time.Duration
	delivered atomic.Int64
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct{ N int64 }
	b, _ := io.ReadAll(r.Body)
	json.Unmarshal(b, &body) //nolint:errcheck
	now := time.Now()
	p.mu.Lock()
	key := r.Header.Get("Idempotency-Key")
	if !p.seen[key] {
		p.seen[key] = true
		p.delivered.Add(1)
		if at, ok := p.committed[body.N]; ok {
			p.lat = append(p.lat, now.Sub(at))
		}
	}
	p.mu.Unlock()
	w.WriteHeader(http.StatusCreated)
}

func (p *provider) reset() {
	p.mu.Lock()
	p.seen, p.committed, p.lat = map[string]bool{}, map[int64]time.Time{}, nil
	p.delivered.Store(0)
	p.mu.Unlock()
}

// system is one side of the comparison.
type system struct {
	name   string
	record func(ctx context.Context, conn *pgx.Conn, resource string, token, n int64) error
	start  func(ctx context.Context) (stop func())
}

type result struct {
	rate          float64 // effects/s draining the backlog
	cpu           time.Duration
	p50, p99, max time.Duration
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("effects", flag.ContinueOnError)
	dsn := fs.String("db", envOr("FENCEGATE_TEST_PG", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"), "a superuser DSN of the PostgreSQL server to use (a throwaway database is created on it)")
	n := fs.Int("effects", 3000, "effects committed before each drain")
	rate := fs.Int("rate", 200, "effects per second committed in the latency phase, all producers together")
	secs := fs.Int("seconds", 5, "length of the latency phase")
	if err := fs.Parse(args); err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	suffix := make([]byte, 6)
	rand.Read(suffix) //nolint:errcheck
	name := "fg_bench_effects_" + hex.EncodeToString(suffix)
	owner := name + "_owner"
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer func() {
		c := context.Background()
		admin.Exec(c, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") //nolint:errcheck
		admin.Exec(c, "DROP ROLE IF EXISTS "+owner)                    //nolint:errcheck
	}()
	u, err := url.Parse(*dsn)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	dbDSN := u.String()
	conn, err := pgx.Connect(ctx, dbDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: owner}); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, resource text NOT NULL,
		payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(), delivered_at timestamptz);
		CREATE INDEX outbox_pending ON outbox (id) WHERE delivered_at IS NULL`); err != nil {
		return err
	}
	prov := &provider{}
	prov.reset()
	srv := httptest.NewServer(prov)
	defer srv.Close()
	quiet := slog.New(slog.DiscardHandler)

	systems := []system{
		{
			name: "fencegate relay",
			record: func(ctx context.Context, c *pgx.Conn, resource string, token, n int64) error {
				tx, err := c.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				if _, err := tx.Exec(ctx, fencegate.FenceSQL, resource, token); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, fencegate.EffectSQL, resource, "pay", fmt.Sprintf(`{"n": %d}`, n)); err != nil {
					return err
				}
				return tx.Commit(ctx)
			},
			start: func(ctx context.Context) func() {
				r, err := relay.New(relay.Config{DSN: dbDSN, Targets: []relay.Target{{Name: "pay", URL: srv.URL, Concurrency: 64}}, Logger: quiet})
				if err != nil {
					panic(err)
				}
				rctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { r.Run(rctx, nil); close(done) }() //nolint:errcheck
				return func() { cancel(); <-done }
			},
		},
		{
			name: "plain outbox (SKIP LOCKED)",
			record: func(ctx context.Context, c *pgx.Conn, resource string, _, n int64) error {
				tx, err := c.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(ctx) //nolint:errcheck
				if _, err := tx.Exec(ctx, "INSERT INTO outbox (resource, payload) VALUES ($1, $2)", resource, fmt.Sprintf(`{"n": %d}`, n)); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "SELECT pg_notify('plain_outbox', '')"); err != nil {
					return err
				}
				return tx.Commit(ctx)
			},
			start: func(ctx context.Context) func() { return plainRelay(ctx, dbDSN, srv.URL) },
		},
	}

	results := map[string]result{}
	var tokens atomic.Int64
	for _, resources := range []int{1, 64} {
		for _, s := range systems {
			key := fmt.Sprintf("%s|%d", s.name, resources)
			// Throughput: commit the backlog, then drain it.
			prov.reset()
			if err := produce(ctx, dbDSN, s, resources, *n, 0, &tokens, prov); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			cpu0 := selfCPU()
			t0 := time.Now()
			stop := s.start(ctx)
			drainBy := time.Now().Add(5 * time.Minute)
			for prov.delivered.Load() < int64(*n) && ctx.Err() == nil {
				if time.Now().After(drainBy) {
					stop()
					return fmt.Errorf("%s: %d of %d effects delivered after 5 minutes", s.name, prov.delivered.Load(), *n)
				}
				time.Sleep(2 * time.Millisecond)
			}
			el := time.Since(t0)
			cpu := selfCPU() - cpu0
			// Latency: a steady rate while the relay runs.
			prov.reset()
			total := *rate * *secs
			if err := produce(ctx, dbDSN, s, resources, total, *rate, &tokens, prov); err != nil {
				stop()
				return fmt.Errorf("%s: %w", s.name, err)
			}
			deadline := time.Now().Add(30 * time.Second)
			for prov.delivered.Load() < int64(total) && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			stop()
			prov.mu.Lock()
			lat := slices.Clone(prov.lat)
			prov.mu.Unlock()
			slices.Sort(lat)
			res := result{rate: float64(*n) / el.Seconds(), cpu: cpu / time.Duration(*n)}
			if len(lat) > 0 {
				res.p50, res.p99, res.max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
			}
			results[key] = res
			fmt.Fprintf(os.Stderr, "%s, %d resources: %.0f effects/s, p50 %v, p99 %v\n", s.name, resources, res.rate, res.p50, res.p99)
			if _, err := conn.Exec(ctx, "TRUNCATE outbox; DELETE FROM fencegate.effects"); err != nil {
				return err
			}
		}
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "relay\tresources\teffects/s (drain of %d)\tCPU/effect (relay+provider)\tp50 commit->delivery\tp99\tmax (%d/s for %ds)\t\n", *n, *rate, *secs)
	for _, resources := range []int{1, 64} {
		for _, s := range systems {
			r := results[fmt.Sprintf("%s|%d", s.name, resources)]
			fmt.Fprintf(w, "%s\t%d\t%.0f\t%v\t%v\t%v\t%v\t\n", s.name, resources, r.rate, r.cpu.Round(time.Microsecond),
				r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.max.Round(100*time.Microsecond))
		}
	}
	return w.Flush()
}

// produce commits count effects over resources (round robin), from one
// producer per resource; at rate per second in all when rate > 0, else as
// fast as they go. The commit time of each is kept for the latency.
func produce(ctx context.Context, dsn string, s system, resources, count, rate int, tokens *atomic.Int64, p *provider) error {
	var wg sync.WaitGroup
	errs := make(chan error, resources)
	var next atomic.Int64
	start := time.Now()
	base := tokens.Load()
	for r := range resources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(context.Background())
			resource := "acct:" + strconv.Itoa(r)
			for {
				i := next.Add(1)
				if i > int64(count) {
					return
				}
				if rate > 0 {
					if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
						time.Sleep(d)
					}
				}
				n := base + i
				if err := s.record(ctx, c, resource, n, n); err != nil {
					errs <- err
					return
				}
				at := time.Now()
				p.mu.Lock()
				p.committed[n] = at
				p.mu.Unlock()
			}
		}()
	}
	wg.Wait()
	tokens.Add(int64(count))
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// plainRelay is the plain outbox relay: four workers, each a loop of
// BEGIN; SELECT ... FOR UPDATE SKIP LOCKED LIMIT 16; POST them in
// parallel; UPDATE ... SET delivered_at; COMMIT, waking on NOTIFY or every
// second.
func plainRelay(ctx context.Context, dsn, target string) (stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	wake := make([]chan struct{}, 4)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for i := range wake {
		wake[i] = make(chan struct{}, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(rctx, dsn)
			if err != nil {
				return
			}
			defer c.Close(context.Background())
			for rctx.Err() == nil {
				got, err := plainRound(rctx, c, client, target)
				if err != nil {
					if rctx.Err() == nil {
						fmt.Fprintln(os.Stderr, "plain relay:", err)
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				if got > 0 {
					continue
				}
				select {
				case <-rctx.Done():
				case <-wake[i]:
				case <-time.After(time.Second):
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(rctx, dsn)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(rctx, "LISTEN plain_outbox"); err != nil {
			return
		}
		for {
			if _, err := c.WaitForNotification(rctx); err != nil {
				return
			}
			for _, w := range wake {
				select {
				case w <- struct{}{}:
				default:
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

func plainRound(ctx context.Context, c *pgx.Conn, client *http.Client, target string) (int, error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	rows, err := tx.Query(ctx, "SELECT id, resource, payload::text FROM outbox WHERE delivered_at IS NULL ORDER BY id LIMIT 16 FOR UPDATE SKIP LOCKED")
	if err != nil {
		return 0, err
	}
	type row struct {
		ID       int64
		Resource string
		Payload  string
	}
	rs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil || len(rs) == 0 {
		return 0, err
	}
	ok := make([]bool, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(r.Payload))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "outbox-"+strconv.FormatInt(r.ID, 10))
			resp, err := client.Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body) //nolint:errcheck
			resp.Body.Close()
			ok[i] = resp.StatusCode < 300
		}()
	}
	wg.Wait()
	var done []int64
	for i, r := range rs {
		if ok[i] {
			done = append(done, r.ID)
		}
	}
	if _, err := tx.Exec(ctx, "UPDATE outbox SET delivered_at = now() WHERE id = ANY ($1)", done); err != nil {
		return 0, err
	}
	return len(rs), tx.Commit(ctx)
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru) //nolint:errcheck
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
