// Command tokens compares fencing-token issuance by a three-node fencegate
// token cluster with a three-node etcd cluster (a token being the revision
// of a Put), both started on loopback as real processes with fsync on.
//
//	go run ./internal/bench/tokens [--runs 3] [--duration 5s] [--concurrency 1,64] [--json] [--keep]
//
// For each concurrency it reports tokens/s and the p50/p99 latency of one
// token, the median of --runs runs, and the ratios fencegate/etcd. Each side
// gets the same treatment: a fresh client per measured run, a warm-up on
// that client first, connections reused, requests sent to the leader. The
// order of the systems alternates from run to run. Everything the command
// starts (processes, temporary directories) is removed when it ends, also
// on error or Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(bench.ExitCode("bench tokens", err, os.Stderr))
}

// errNoTokenService means the fencegate binary has no token service.
var errNoTokenService = errors.New("this fencegate build has no token service ('fencegate token serve'); run with --systems etcd to measure etcd alone")

// minter hands out one fencing token per call.
type minter interface {
	Next(ctx context.Context) (int64, error)
	Close() error
}

// system is one side of the comparison.
type system struct {
	name      string
	version   string
	newMinter func(ctx context.Context) (minter, error)
}

var knownSystems = []string{"fencegate", "etcd"}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokens", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f bench.Flags
	f.Register(fs, []int{1, 64})
	systemsFlag := fs.String("systems", "fencegate,etcd", "comma-separated systems to measure")
	resource := fs.String("resource", "bench", "resource name tokens are asked for")
	binFlag := fs.String("fencegate-bin", "", "fencegate binary to run (default: build ./cmd/fencegate into the temporary directory)")
	leaderFirst := fs.Bool("leader-first", true, "send both clients' requests to the current leader: fencegate's client gets the leader's URL first, etcd's client the leader's endpoint alone; false gives both every node, so fencegate starts at n1 (a follower forwards) and clientv3 balances across members")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return bench.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return bench.Usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := f.Validate(); err != nil {
		return bench.UsageError{Err: err}
	}
	want := strings.Split(*systemsFlag, ",")
	for _, s := range want {
		if !slices.Contains(knownSystems, s) {
			return bench.Usagef("unknown system %q in --systems; choose from %s", s, strings.Join(knownSystems, ","))
		}
	}

	var etcdBin string
	var err error
	if slices.Contains(want, "etcd") {
		if etcdBin, err = bench.LookPath("etcd", "etcd-server"); err != nil {
			return err
		}
	}

	dir, err := os.MkdirTemp("", "fencegate-bench-tokens-")
	if err != nil {
		return fmt.Errorf("create temporary directory: %w", err)
	}
	var cl bench.Cleanup
	defer cl.Run()
	cl.Add(func() {
		if f.Keep {
			fmt.Fprintf(stderr, "kept %s (data, logs)\n", dir)
			return
		}
		os.RemoveAll(dir)
	})
	g := bench.NewGroup(dir)
	cl.Add(func() { g.StopAll(10 * time.Second) })
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }

	var systems []system
	for _, name := range want {
		var s system
		var err error
		switch name {
		case "fencegate":
			s, err = setupFencegate(ctx, g, *binFlag, dir, *resource, *leaderFirst, logf)
		case "etcd":
			s, err = setupEtcd(ctx, g, etcdBin, dir, *resource, *leaderFirst, logf)
		}
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}

	rep := newReport(f, systems)
	for r := range f.Runs {
		order := slices.Clone(systems)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range f.Concurrency {
			for _, s := range order {
				res, err := measure(ctx, s, c, f)
				if err != nil {
					return fmt.Errorf("run %d, %s at concurrency %d: %w", r+1, s.name, c, err)
				}
				logf("run %d/%d  c=%-3d %-9s %s tokens/s  p50 %s ms  p99 %s ms", r+1, f.Runs, c, s.name,
					bench.FormatRate(res.PerSec), bench.FormatMillis(res.P50), bench.FormatMillis(res.P99))
				rep.add(s.name, c, res)
			}
		}
	}
	if f.JSON {
		return rep.writeJSON(stdout)
	}
	return rep.writeText(stdout)
}

// measure warms a fresh client up at concurrency c and then measures one run.
func measure(ctx context.Context, s system, c int, f bench.Flags) (bench.Result, error) {
	m, err := s.newMinter(ctx)
	if err != nil {
		return bench.Result{}, err
	}
	defer m.Close()
	op := func(ctx context.Context, _ int) error {
		_, err := m.Next(ctx)
		return err
	}
	if f.Warmup > 0 {
		if _, err := bench.RunClosed(ctx, c, f.Warmup, op); err != nil && ctx.Err() == nil {
			// Failures while warming up are only fatal when they persist.
			if res, err := bench.RunClosed(ctx, 1, 100*time.Millisecond, op); err != nil || res.Ops == 0 {
				return bench.Result{}, fmt.Errorf("warm up: %w", err)
			}
		}
	}
	res, err := bench.RunClosed(ctx, c, f.Duration, op)
	if ctx.Err() != nil {
		return bench.Result{}, ctx.Err()
	}
	if err != nil && (res.Ops == 0 || res.Errors*100 > res.Ops) {
		return bench.Result{}, err
	}
	return res, nil
}

func setupFencegate(ctx context.Context, g *bench.Group, bin, dir, resource string, leaderFirst bool, logf func(string, ...any)) (system, error) {
	version := "prebuilt " + bin
	if bin == "" {
		logf("building fencegate")
		var err error
		if bin, version, err = bench.BuildFencegate(ctx, dir); err != nil {
			return system{}, err
		}
	}
	if !bench.HasCommand(ctx, bin, "token", "serve") {
		return system{}, errNoTokenService
	}
	logf("starting 3 fencegate token nodes")
	c, err := startFencegate(ctx, g, bin, filepath.Join(dir, "fencegate"))
	if err != nil {
		return system{}, err
	}
	return system{
		name:    "fencegate",
		version: version,
		newMinter: func(ctx context.Context) (minter, error) {
			return newFencegateMinter(ctx, c, resource, leaderFirst)
		},
	}, nil
}

func setupEtcd(ctx context.Context, g *bench.Group, etcdBin, dir, resource string, leaderFirst bool, logf func(string, ...any)) (system, error) {
	logf("starting 3 etcd members")
	c, err := startEtcd(ctx, g, etcdBin, filepath.Join(dir, "etcd"))
	if err != nil {
		return system{}, err
	}
	return system{
		name: "etcd",
		version: strings.Replace(bench.Version(ctx, etcdBin, "--version"), "etcd Version: ", "etcd ", 1) +
			" (server), go.etcd.io/etcd/client/v3 v3.6.12 (client)",
		newMinter: func(ctx context.Context) (minter, error) {
			endpoints := c.clientURLs
			if leaderFirst {
				leader, err := c.leaderURL(ctx)
				if err != nil {
					return nil, err
				}
				endpoints = []string{leader}
			}
			return newEtcdMinter(endpoints, resource)
		},
	}, nil
}
