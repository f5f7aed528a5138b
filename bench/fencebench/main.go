// Command fencebench prints, side by side, what protecting a table costs:
// the same workloads on a protected table and on its unprotected twin, in
// one run, with medians over --runs runs and the CPU time the serving
// PostgreSQL backend spent per operation (which moves far less than time on
// a shared machine). The workloads: a fenced single-row write transaction,
// then INSERT ... SELECT, COPY and UPDATE of --rows rows in one fenced
// transaction each, first all rows of one resource, then spread over
// --resources resources (fenced with one fence_many).
//
//	go run ./fencebench [--db DSN] [--runs 5] [--writes 2000] [--rows 100000] [--resources 1000] [--only TEXT]
//
// It creates a throwaway database and owner role on the server of --db
// (PostgreSQL on this host, a superuser DSN) and drops them when it ends.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/cputime"
	"github.com/fencegate/fencegate/internal/fencebench"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "fencebench:", err)
		os.Exit(1)
	}
}

// sample is one workload's figures on one table in one run.
type sample struct {
	wall, cpu time.Duration // per operation
}

type workload struct {
	name string
	unit string // "tps" for rates, "ms" for durations
	ops  int    // operations per run
	op   func(ctx context.Context, conn *pgx.Conn, table string, run int) error
	// prep, if set, runs before each timed op, untimed.
	prep func(ctx context.Context, conn *pgx.Conn, table string) error
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fencebench", flag.ContinueOnError)
	dsn := fs.String("db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "a superuser DSN of a PostgreSQL server on this host")
	runs := fs.Int("runs", 5, "runs of each workload on each table; medians are printed")
	writes := fs.Int("writes", 2000, "fenced single-row write transactions per run and table")
	rows := fs.Int("rows", 100000, "rows per bulk INSERT, COPY and UPDATE")
	resources := fs.Int("resources", 1000, "resources the rows of the second INSERT, COPY and UPDATE are spread over (the first: one)")
	only := fs.String("only", "", "run only the workloads whose name contains this text")
	syncCommit := fs.String("synchronous-commit", "", "synchronous_commit for the benchmark's sessions (default: the server's)")
	workMem := fs.String("work-mem", "", "work_mem for the benchmark's sessions, such as 64MB (default: the server's); a statement check's transition table spills to disk past it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *runs < 1 || *writes < 1 || *rows < 1 || *resources < 1 {
		return fmt.Errorf("--runs, --writes, --rows and --resources must be positive")
	}
	admin, err := pgx.Connect(ctx, *dsn)
	if err != nil {
		return fmt.Errorf("connect to --db: %w", err)
	}
	defer admin.Close(context.Background())
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := "fencebench_" + hex.EncodeToString(suffix)
	owner := name + "_owner"
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer func() {
		c := context.Background()
		_, _ = admin.Exec(c, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		_, _ = admin.Exec(c, "DROP ROLE IF EXISTS "+owner)
	}()
	u, err := url.Parse(*dsn)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	cfg, err := pgx.ParseConfig(u.String())
	if err != nil {
		return err
	}
	if *syncCommit != "" {
		cfg.RuntimeParams["synchronous_commit"] = *syncCommit
	}
	if *workMem != "" {
		cfg.RuntimeParams["work_mem"] = *workMem
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := pgfence.Install(ctx, conn, pgfence.InstallOptions{OwnerRole: owner}); err != nil {
		return err
	}
	if err := fencebench.Setup(ctx, conn, 1000); err != nil {
		return err
	}
	var version, sc, wm string
	_ = conn.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('synchronous_commit'), current_setting('work_mem')").Scan(&version, &sc, &wm)

	next := map[string]int64{fencebench.Protected: 1000, fencebench.Unprotected: 1000}
	bulkFirst := func(table string) int64 { v := next[table] + 1; next[table] += int64(*rows); return v }
	workloads := []workload{
		{name: "fenced single-row write transaction", unit: "tps", ops: *writes, op: func(ctx context.Context, c *pgx.Conn, table string, _ int) error {
			for i := 0; i < *writes; i++ {
				if err := fencebench.FencedWrite(ctx, c, table, int64(i%1000+1), 1); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, res := range []int{1, *resources} {
		res := res
		var data string
		workloads = append(workloads,
			workload{name: fmt.Sprintf("INSERT ... SELECT of %d rows, %s", *rows, plural(res)), unit: "ms", ops: 1, op: func(ctx context.Context, c *pgx.Conn, table string, _ int) error {
				return fencebench.BulkInsert(ctx, c, table, bulkFirst(table), *rows, res)
			}},
			workload{name: fmt.Sprintf("COPY of %d rows, %s", *rows, plural(res)), unit: "ms", ops: 1,
				prep: func(ctx context.Context, c *pgx.Conn, table string) error {
					data = fencebench.CopyData(bulkFirst(table), *rows, res)
					return nil
				},
				op: func(ctx context.Context, c *pgx.Conn, table string, _ int) error {
					return fencebench.BulkCopy(ctx, c, table, data, res)
				}},
			workload{name: fmt.Sprintf("UPDATE of %d rows, %s", *rows, plural(res)), unit: "ms", ops: 1,
				prep: func(ctx context.Context, c *pgx.Conn, table string) error {
					if err := fencebench.BulkInsert(ctx, c, table, bulkFirst(table), *rows, res); err != nil {
						return err
					}
					_, err := c.Exec(ctx, "VACUUM ANALYZE "+table)
					return err
				},
				op: func(ctx context.Context, c *pgx.Conn, table string, _ int) error {
					return fencebench.BulkUpdate(ctx, c, table, 1001, res)
				}},
		)
	}
	if *only != "" {
		var keep []workload
		for _, w := range workloads {
			if strings.Contains(w.name, *only) {
				keep = append(keep, w)
			}
		}
		workloads = keep
	}

	load0, _ := os.ReadFile("/proc/loadavg")
	mach0, merr := cputime.ReadMachineCPU()
	start := time.Now()
	fmt.Fprintf(out, "PostgreSQL %s, synchronous_commit=%s, work_mem=%s, %d runs; load average at start: %s", version, sc, wm, *runs, string(load0))
	t := bench.NewTable("workload", "unprotected", "protected", "ratio", "ratio spread", "backend CPU/op unprot.", "backend CPU/op prot.", "CPU ratio", "CPU ratio spread")
	for _, w := range workloads {
		res := map[string][]sample{}
		for r := 0; r < *runs; r++ {
			order := []string{fencebench.Unprotected, fencebench.Protected}
			if r%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, table := range order {
				if w.unit == "ms" {
					if err := fencebench.Empty(ctx, conn, 1000); err != nil {
						return err
					}
					next[table] = 1000
				}
				if w.prep != nil {
					if err := w.prep(ctx, conn, table); err != nil {
						return fmt.Errorf("%s on %s: %w", w.name, table, err)
					}
				}
				cpu0, err := fencebench.BackendCPU(ctx, conn)
				if err != nil {
					return err
				}
				t0 := time.Now()
				if err := w.op(ctx, conn, table, r); err != nil {
					return fmt.Errorf("%s on %s: %w", w.name, table, err)
				}
				wall := time.Since(t0)
				cpu1, err := fencebench.BackendCPU(ctx, conn)
				if err != nil {
					return err
				}
				res[table] = append(res[table], sample{wall: wall / time.Duration(w.ops), cpu: (cpu1 - cpu0) / time.Duration(w.ops)})
			}
		}
		med := func(table string, f func(sample) time.Duration) time.Duration {
			var ds []time.Duration
			for _, s := range res[table] {
				ds = append(ds, f(s))
			}
			return bench.MedianDuration(ds)
		}
		wallU, wallP := med(fencebench.Unprotected, func(s sample) time.Duration { return s.wall }), med(fencebench.Protected, func(s sample) time.Duration { return s.wall })
		cpuU, cpuP := med(fencebench.Unprotected, func(s sample) time.Duration { return s.cpu }), med(fencebench.Protected, func(s sample) time.Duration { return s.cpu })
		// Each run's ratio pairs the two tables' figures of that run (run
		// back to back, in alternating order): their spread shows how far
		// the load moved the median.
		ratios := func(f func(sample) time.Duration, invert bool) []float64 {
			var rs []float64
			for i := range res[fencebench.Protected] {
				p, u := float64(f(res[fencebench.Protected][i])), float64(f(res[fencebench.Unprotected][i]))
				if invert {
					p, u = u, p
				}
				if u > 0 {
					rs = append(rs, p/u)
				}
			}
			return rs
		}
		wallOf := func(s sample) time.Duration { return s.wall }
		cpuOf := func(s sample) time.Duration { return s.cpu }
		var u, p string
		wr := ratios(wallOf, w.unit == "tps")
		if w.unit == "tps" {
			u, p = bench.FormatRate(float64(time.Second)/float64(wallU))+" tps", bench.FormatRate(float64(time.Second)/float64(wallP))+" tps"
		} else {
			u, p = bench.FormatMillis(wallU)+" ms", bench.FormatMillis(wallP)+" ms"
		}
		t.Row(w.name, u, p, bench.FormatRatio(bench.Median(wr)), spread(wr), micros(cpuU), micros(cpuP), bench.FormatRatio(float64(cpuP)/float64(cpuU)), spread(ratios(cpuOf, false)))
	}
	fmt.Fprintln(out)
	t.WriteTo(out) //nolint:errcheck
	fmt.Fprintln(out)
	fmt.Fprintln(out, "ratio: median over the runs of protected/unprotected time for bulk work, unprotected/protected time (= protected/unprotected rate)")
	fmt.Fprintln(out, "for transactions, each run pairing the two tables; spread: the lowest and highest of those per-run ratios;")
	fmt.Fprintln(out, "backend CPU/op: the serving backend's user+system CPU per transaction (10 ms /proc resolution, summed over each run).")
	load1, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(out, "load average at end: %s", string(load1))
	if merr == nil {
		if mach1, err := cputime.ReadMachineCPU(); err == nil {
			d := mach1.Sub(mach0)
			fmt.Fprintf(out, "machine CPU busy over the run: %.0f%% of %v x CPUs; hypervisor steal %.1f%%\n",
				100*float64(d.Busy)/float64(time.Since(start))/float64(cpus()), time.Since(start).Round(time.Second), 100*d.StealShare())
		}
	}
	return nil
}

// spread prints the lowest and highest of rs.
func spread(rs []float64) string {
	if len(rs) == 0 {
		return "-"
	}
	lo, hi := rs[0], rs[0]
	for _, r := range rs {
		lo, hi = min(lo, r), max(hi, r)
	}
	return bench.FormatRatio(lo) + "-" + bench.FormatRatio(hi)
}

// plural names a count of resources.
func plural(n int) string {
	if n == 1 {
		return "one resource"
	}
	return fmt.Sprintf("%d resources", n)
}

func micros(d time.Duration) string {
	us := float64(d) / float64(time.Microsecond)
	if us >= 10000 {
		return bench.FormatRate(us/1000) + " ms"
	}
	return bench.FormatRate(us) + " µs"
}

func cpus() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 1
	}
	n := strings.Count(string(b), "\nprocessor") + 1
	return n
}
