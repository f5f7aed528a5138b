package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/faults"
	"github.com/fencegate/fencegate/internal/pgdb"
)

func init() {
	register(&command{name: "faults", summary: "fault campaign: prove no stale write is accepted under pauses, crashes, partitions, clock jumps", run: runFaults})
}

func runFaults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate faults", flag.ContinueOnError)
	runs := fs.Int("runs", 5, "number of runs, each on a fresh stack")
	seed := fs.Int64("seed", 1, "seed of run 1's fault schedule; run i uses seed+i-1")
	duration := fs.Duration("duration", 20*time.Second, "how long the nemesis injects faults in each run")
	reportDir := fs.String("report-dir", "faults-report", "directory for the reports: run-NNN/{history.jsonl,tokens.html,result.txt,logs/} and summary.txt")
	redlock := fs.Bool("redlock", false, "lock with Redlock on five Redis masters instead of one Redis (default false)")
	faultList := fs.String("faults", "all", "comma-separated faults to draw from, or all (default all):\n"+faults.FaultHelp())
	scenario := fs.String("scenario", "", "a named scenario ("+strings.Join(faults.ScenarioNames(), ", ")+") or a fault list, injected once, in order, instead of a random schedule (default empty: random)")
	pruneEvery := fs.Duration("prune-every", 0, "also prune the marks about this often during each run, beside the faults, to a floor drawn from the clients' latest tokens (default 0: only when prune-marks is drawn)")
	clients := fs.Int("clients", 4, "workload client processes per run")
	ttl := fs.Duration("ttl", time.Second, "lock TTL")
	pg := fs.String("postgres", pgdb.DefaultAdminDSN, "DSN of a superuser of the PostgreSQL server runs create their databases and roles on (each run drops its own)")
	verbose := fs.Bool("v", false, "log every fault and process start (default false)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; faults takes only flags", fs.Arg(0))
	}
	if *runs <= 0 || *duration <= 0 || *clients < 2 || *ttl <= 0 || *pruneEvery < 0 {
		return usagef("--runs and --duration must be positive, --clients at least 2, --ttl positive, --prune-every not negative")
	}
	list, err := faults.ParseFaults(*faultList)
	if err != nil {
		return usagef("--faults: %v", err)
	}
	var scen []string
	if *scenario != "" {
		if scen, err = faults.ParseScenario(*scenario); err != nil {
			return usagef("--scenario: %v", err)
		}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	sum, err := faults.Run(ctx, faults.Config{
		Runs: *runs, Seed: *seed, Duration: *duration, ReportDir: *reportDir, Redlock: *redlock,
		Faults: list, Scenario: scen, PruneEvery: *pruneEvery, Clients: *clients, TTL: *ttl, PostgreSQL: *pg,
		Logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		Out:    stdout,
	})
	if sum != nil {
		fmt.Fprintln(stdout, sum.Line())
		for _, f := range sum.Failed {
			fmt.Fprintln(stdout, "FAIL", f)
		}
		fmt.Fprintf(stdout, "reports in %s\n", *reportDir)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("interrupted; every process was stopped: %w", err)
	}
	return err
}
