// Command proxy measures what the fencegate PostgreSQL proxy costs: pgbench
// straight to PostgreSQL, through PgBouncer (session pooling) and through
// "fencegate proxy", side by side in one run.
//
//	go run ./proxy [--runs 3] [--duration 5s] [--concurrency 1,8] [--json] [--keep]
//
// Workloads: read-only pgbench (-S) in the simple and the extended query
// protocol, and a fenced write (see fencedScript) on a table fencegate
// protects, the same script on every path. Every path runs as one
// application role the command creates (the proxy's gate refuses the
// administrator). Beside each throughput it prints the CPU time per
// transaction of the process in the middle and of the machine, and the
// middle process's context switches per transaction. Every figure is the
// median of --runs runs; the order of the systems rotates from run to run. The command creates its own
// database (pgbench -i, schema fencegate, the protected table), roles, and
// PgBouncer and proxy processes, and removes all of them when it ends, also
// on error or Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/proc"
)

func main() { bench.Main("bench proxy", run) }

var knownSystems = []string{"direct", "pgbouncer", "fencegate"}

// options are the command's flags.
type options struct {
	bench.Flags
	pg        string
	scale     int
	workloads []workload
	systems   []string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.Register(fs, []int{1, 8})
	fs.StringVar(&o.pg, "postgres", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable",
		"admin `DSN` of the PostgreSQL server measured")
	fs.IntVar(&o.scale, "scale", 10, "pgbench scale factor of the benchmark database")
	wl := fs.String("workloads", "select-simple,select-extended,fenced-write",
		"comma-separated workloads: select-simple, select-extended, fenced-write (extended protocol), fenced-write-simple, "+
			"nobranch-extended (pgbench -N: writes without fences to pgbench's own tables, which are not protected)")
	sys := fs.String("systems", "direct,pgbouncer,fencegate", "comma-separated paths to measure")
	if err := bench.Parse(fs, &o.Flags, args); err != nil {
		return o, err
	}
	if o.scale < 1 {
		return o, bench.Usagef("--scale must be at least 1")
	}
	if slices.Max(o.Concurrency)*100 > o.scale*100_000 {
		return o, bench.Usagef("--scale %d has too few accounts for %d clients of 100 accounts each", o.scale, slices.Max(o.Concurrency))
	}
	for _, name := range strings.Split(*wl, ",") {
		w, ok := findWorkload(name)
		if !ok {
			return o, bench.Usagef("unknown workload %q in --workloads", name)
		}
		o.workloads = append(o.workloads, w)
	}
	var err error
	o.systems, err = bench.ParseSystems(*sys, knownSystems)
	return o, err
}

func (o options) fenced() bool {
	return slices.ContainsFunc(o.workloads, func(w workload) bool { return w.fenced })
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	has := func(s string) bool { return slices.Contains(o.systems, s) }

	// Refuse before creating anything when a part is missing.
	pgbenchBin, err := bench.LookPath("pgbench", "postgresql-client")
	if err != nil {
		return err
	}
	var bouncerBin string
	if has("pgbouncer") {
		if bouncerBin, err = bench.LookPath("pgbouncer", "pgbouncer"); err != nil {
			return err
		}
	}
	up, err := upstreamTarget(o.pg, "")
	if err != nil {
		return bench.UsageError{Err: err}
	}

	ws, err := bench.NewWorkspace("fencegate-bench-proxy-", o.Keep, "configs, scripts, logs", stderr)
	if err != nil {
		return err
	}
	cl, dir, g := ws.Cleanup, ws.Dir, ws.Group
	defer cl.Run()
	// PgBouncer runs as another user and reads its config from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("open up temporary directory: %w", err)
	}

	versions := map[string]string{"pgbench": bench.Version(ctx, pgbenchBin, "--version")}
	var fgBin string
	if has("fencegate") {
		if fgBin, versions["fencegate"], err = o.Fencegate(ctx, dir, logf); err != nil {
			return err
		}
		if !bench.HasCommand(ctx, fgBin, "proxy") {
			return errNoProxy
		}
	}
	var sc scripts
	if o.fenced() {
		if sc, err = writeScripts(dir); err != nil {
			return err
		}
	}

	// Cleanups run last first: the roles go after the database.
	app := newAppRole()
	cl.Add(func() {
		if err := app.drop(o.pg); err != nil {
			logf("%v", err)
		}
	})
	up.db = pgdb.RandomName("fg_bench_")
	if _, err = pgdb.Create(ctx, o.pg, up.db); err != nil {
		return fmt.Errorf("PostgreSQL at %s (is it running? make services starts it): %w", o.pg, err)
	}
	cl.Add(func() {
		if err := pgdb.Drop(context.Background(), o.pg, up.db); err != nil {
			logf("%v", err)
		}
	})
	versions["postgresql"] = serverVersion(ctx, up)
	logf("creating pgbench tables in %s (scale %d)", up.db, o.scale)
	if err := initPgbench(ctx, pgbenchBin, up, o.scale); err != nil {
		return err
	}
	logf("installing schema fencegate, protecting %s, creating role %s", fencedTable, app.name)
	if err := prepareDatabase(ctx, up, app, slices.Max(o.Concurrency), o.fenced()); err != nil {
		return err
	}
	up.user = app.name // pgbench connects as the application role on every path

	targets, err := startPaths(ctx, o, g, dir, up, fgBin, bouncerBin, versions, logf)
	if err != nil {
		return err
	}
	rep := newReport(o, versions)
	if err := measureAll(ctx, o, pgbenchBin, targets, sc, rep, logf); err != nil {
		return err
	}
	if o.JSON {
		return rep.writeJSON(stdout)
	}
	return rep.writeText(stdout)
}

// startPaths starts PgBouncer and the proxies the options ask for and
// returns where pgbench connects for each path.
func startPaths(ctx context.Context, o options, g *proc.Group, dir string, up pgbenchTarget, fgBin, bouncerBin string,
	versions map[string]string, logf func(string, ...any)) (map[string]pgbenchTarget, error) {
	local := func(port, pid int) pgbenchTarget {
		return pgbenchTarget{host: "127.0.0.1", port: port, user: up.user, db: up.db, pid: pid}
	}
	targets := map[string]pgbenchTarget{"direct": up}
	if slices.Contains(o.systems, "pgbouncer") {
		logf("starting pgbouncer")
		port, pid, err := startBouncer(ctx, g, bouncerBin, filepath.Join(dir, "pgbouncer"), up, slices.Max(o.Concurrency))
		if err != nil {
			return nil, err
		}
		targets["pgbouncer"] = local(port, pid)
		versions["pgbouncer"] = bench.Version(ctx, bouncerBin, "--version")
	}
	if !slices.Contains(o.systems, "fencegate") {
		return targets, nil
	}
	logf("starting fencegate proxy")
	port, pid, err := startProxy(ctx, g, "fencegate-proxy", fgBin, up)
	if err != nil {
		return nil, err
	}
	targets["fencegate"] = local(port, pid)
	return targets, nil
}

// measureAll runs every workload on every path at every concurrency,
// --runs times, rotating the order of the paths from run to run.
func measureAll(ctx context.Context, o options, pgbenchBin string, targets map[string]pgbenchTarget, sc scripts,
	rep *report, logf func(string, ...any)) error {
	for r := range o.Runs {
		order := rotate(o.systems, r)
		for _, w := range o.workloads {
			for _, c := range o.Concurrency {
				for _, s := range order {
					args, target := w.pgbenchArgs(sc), targets[s]
					if o.Warmup > 0 {
						if _, err := runPgbench(ctx, pgbenchBin, target, c, o.Warmup, args); err != nil {
							return fmt.Errorf("warm up %s on %s at %d clients: %w", w.name, s, c, err)
						}
					}
					st, err := measuredRun(ctx, pgbenchBin, target, c, o.Duration, args)
					if err != nil {
						return fmt.Errorf("run %d, %s on %s at %d clients: %w", r+1, w.name, s, c, err)
					}
					logf("run %d/%d  %-19s c=%-2d %-9s %8s tps  latency %s ms  cpu/tx %s  steal %s", r+1, o.Runs, w.name, c, s,
						bench.FormatRate(st.TPS), bench.FormatMillis(st.LatencyAvg), cpuNote(st), bench.FormatShare(st.Steal))
					rep.add(w.name, s, c, st)
				}
			}
		}
	}
	return nil
}

// rotate returns xs started at index r (mod len), so that each system goes
// first in turn.
func rotate(xs []string, r int) []string {
	n := len(xs)
	out := make([]string, n)
	for i := range xs {
		out[i] = xs[(i+r)%n]
	}
	return out
}
