// Command tokens compares fencing-token issuance by a three-node fencegate
// token cluster with a three-node etcd cluster (a token being the revision
// of a Put), both started on loopback as real processes with fsync on.
//
//	go run ./tokens [--runs 3] [--duration 5s] [--concurrency 1,64] [--json] [--keep]
//
// fencegate runs the read-index path (tokens from a reserved range, one
// confirmation round per batch); fencegate-commit the commit path
// (--commit-per-batch: one Raft commit per batch). For each concurrency it
// reports tokens/s, the p50/p99 latency of one
// token and the CPU time the three server processes spent per token (with
// the hypervisor's steal beside it), the median of --runs runs, and the
// ratios fencegate/etcd. The TLS variants (fencegate-tls: TLS on the API,
// mutual TLS on Raft and between nodes, client certificates; etcd-tls:
// --client-cert-auth and --peer-client-cert-auth) run beside the plain
// ones, so the table shows what encryption costs each. Each side
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
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/bench"
	"github.com/fencegate/fencegate/internal/cputime"
	"github.com/fencegate/fencegate/internal/proc"
)

func main() { bench.Main("bench tokens", run) }

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
	// pids are the server processes whose CPU time is counted.
	pids func() []int
	// rounds, when set, reads the confirmation-round counters of the
	// read-index path (summed over the nodes).
	rounds func(ctx context.Context) (roundCounters, error)
	// followerPids, when set, returns the server processes that do not
	// lead: on the read-index path their CPU is the rounds' answering
	// side (and Raft's heartbeats), the leader's the rest.
	followerPids func(ctx context.Context) ([]int, error)
}

var knownSystems = []string{"fencegate", "fencegate-commit", "etcd", "fencegate-tls", "etcd-tls"}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokens", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f bench.Flags
	f.Register(fs, []int{1, 64})
	systemsFlag := fs.String("systems", strings.Join(knownSystems, ","), "comma-separated systems to measure: fencegate (read-index path), fencegate-commit (--commit-per-batch), etcd, and the TLS variants fencegate-tls and etcd-tls")
	resource := fs.String("resource", "bench", "resource name tokens are asked for")
	leaderFirst := fs.Bool("leader-first", true, "send both clients' requests to the current leader: fencegate's client gets the leader's URL first, etcd's client the leader's endpoint alone; false gives both every node, so fencegate starts at n1 (a follower forwards) and clientv3 balances across members")
	if err := bench.Parse(fs, &f, args); err != nil {
		return err
	}
	want, err := bench.ParseSystems(*systemsFlag, knownSystems)
	if err != nil {
		return err
	}
	var etcdBin string
	if slices.Contains(want, "etcd") || slices.Contains(want, "etcd-tls") {
		if etcdBin, err = bench.LookPath("etcd", "etcd-server"); err != nil {
			return err
		}
	}

	ws, err := bench.NewWorkspace("fencegate-bench-tokens-", f.Keep, "data, logs", stderr)
	if err != nil {
		return err
	}
	defer ws.Cleanup.Run()
	dir, g := ws.Dir, ws.Group
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }

	var tc *benchTLS
	if slices.Contains(want, "fencegate-tls") || slices.Contains(want, "etcd-tls") {
		if tc, err = newBenchTLS(filepath.Join(dir, "certs")); err != nil {
			return err
		}
	}
	var bin, version string
	if slices.Contains(want, "fencegate") || slices.Contains(want, "fencegate-commit") || slices.Contains(want, "fencegate-tls") {
		if bin, version, err = f.Fencegate(ctx, dir, logf); err != nil {
			return err
		}
	}
	var systems []system
	for _, name := range want {
		var s system
		var err error
		var t *benchTLS
		if strings.HasSuffix(name, "-tls") {
			t = tc
		}
		switch name {
		case "fencegate", "fencegate-commit", "fencegate-tls":
			s, err = setupFencegate(ctx, g, bin, version, dir, *resource, *leaderFirst, t, name == "fencegate-commit", logf)
		case "etcd", "etcd-tls":
			s, err = setupEtcd(ctx, g, etcdBin, dir, *resource, *leaderFirst, t, logf)
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
				logf("run %d/%d  c=%-3d %-16s %s tokens/s  p50 %s ms  p99 %s ms  %s µs CPU/token (client %s)  steal %.0f%%%s", r+1, f.Runs, c, s.name,
					bench.FormatRate(res.PerSec), bench.FormatMillis(res.P50), bench.FormatMillis(res.P99),
					bench.FormatMicros(res.CPUPerOp, 0), bench.FormatMicros(res.ClientCPUPerOp, 0), 100*res.Steal, res.roundLine())
				rep.add(s.name, c, res)
			}
		}
	}
	if f.JSON {
		return rep.writeJSON(stdout)
	}
	return rep.writeText(stdout)
}

// runResult is one measured run: the load's figures, the CPU time the
// system's server processes spent per token, and the share of the
// machine's CPU time the hypervisor stole meanwhile.
type runResult struct {
	bench.Result
	CPUPerOp time.Duration `json:"server_cpu_per_token"`
	// ClientCPUPerOp is the CPU time this process (the clients and the
	// load) spent per token: it shares the machine with the servers.
	ClientCPUPerOp time.Duration `json:"client_cpu_per_token"`
	Steal          float64       `json:"steal"`
	// On the read-index path: confirmation rounds per second, tokens
	// served per round, and the mean time of one round as the leader
	// measured it (from its first question to a majority's answers).
	RoundsPerSec   float64       `json:"rounds_per_sec,omitempty"`
	TokensPerRound float64       `json:"tokens_per_round,omitempty"`
	RoundMean      time.Duration `json:"round_mean,omitempty"`
	// FollowerCPUPerOp is the CPU time the followers spent per token.
	FollowerCPUPerOp time.Duration `json:"follower_cpu_per_token,omitempty"`
}

// roundLine is the round figures for a progress line, or "".
func (r runResult) roundLine() string {
	if r.RoundsPerSec == 0 {
		return ""
	}
	return fmt.Sprintf("  %s rounds/s, %.1f tokens/round, round %s µs, followers' CPU %s µs/token", bench.FormatRate(r.RoundsPerSec),
		r.TokensPerRound, bench.FormatMicros(r.RoundMean, 0), bench.FormatMicros(r.FollowerCPUPerOp, 0))
}

// measure warms a fresh client up at concurrency c and then measures one run.
func measure(ctx context.Context, s system, c int, f bench.Flags) (runResult, error) {
	m, err := s.newMinter(ctx)
	if err != nil {
		return runResult{}, err
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
				return runResult{}, fmt.Errorf("warm up: %w", err)
			}
		}
	}
	var rc0 roundCounters
	var rcErr error
	if s.rounds != nil {
		rc0, rcErr = s.rounds(ctx)
	}
	var fpids []int
	var fcpu0 time.Duration
	fErr := errors.New("not measured")
	if s.followerPids != nil {
		if fpids, fErr = s.followerPids(ctx); fErr == nil {
			fcpu0, fErr = cputime.ProcessCPU(fpids...)
		}
	}
	cpu0, cpuErr := cputime.ProcessCPU(s.pids()...)
	self0, selfErr := cputime.ProcessCPU(os.Getpid())
	mach0, machErr := cputime.ReadMachineCPU()
	start := time.Now()
	res, err := bench.RunClosed(ctx, c, f.Duration, op)
	took := time.Since(start)
	if ctx.Err() != nil {
		return runResult{}, ctx.Err()
	}
	if err != nil && (res.Ops == 0 || res.Errors*100 > res.Ops) {
		return runResult{}, err
	}
	out := runResult{Result: res}
	cpu1, err1 := cputime.ProcessCPU(s.pids()...)
	if self1, err := cputime.ProcessCPU(os.Getpid()); err == nil && selfErr == nil && res.Ops > 0 {
		out.ClientCPUPerOp = (self1 - self0) / time.Duration(res.Ops)
	}
	mach1, err2 := cputime.ReadMachineCPU()
	if cpuErr == nil && err1 == nil && res.Ops > 0 {
		out.CPUPerOp = (cpu1 - cpu0) / time.Duration(res.Ops)
	}
	if machErr == nil && err2 == nil {
		out.Steal = mach1.Sub(mach0).StealShare()
	}
	if fErr == nil && res.Ops > 0 {
		if fcpu1, err := cputime.ProcessCPU(fpids...); err == nil {
			out.FollowerCPUPerOp = (fcpu1 - fcpu0) / time.Duration(res.Ops)
		}
	}
	if s.rounds != nil && rcErr == nil {
		if rc1, err := s.rounds(ctx); err == nil && rc1.rounds > rc0.rounds {
			n := rc1.rounds - rc0.rounds
			out.RoundsPerSec = n / took.Seconds()
			out.TokensPerRound = float64(res.Ops) / n
			out.RoundMean = time.Duration((rc1.seconds - rc0.seconds) / n * float64(time.Second))
		}
	}
	return out, nil
}

func setupFencegate(ctx context.Context, g *proc.Group, bin, version, dir, resource string, leaderFirst bool, tc *benchTLS, commitPerBatch bool, logf func(string, ...any)) (system, error) {
	if !bench.HasCommand(ctx, bin, "token", "serve") {
		return system{}, errNoTokenService
	}
	name := "fencegate" + tc.choose("", "-tls")
	var extra []string
	if commitPerBatch {
		name, extra = "fencegate-commit", []string{"--commit-per-batch"}
		version += "; --commit-per-batch"
	} else {
		version += "; read-index"
	}
	logf("starting 3 fencegate token nodes%s%s", tc.choose("", " with TLS"), strings.Join(append([]string{""}, extra...), " "))
	c, err := startFencegate(ctx, g, bin, filepath.Join(dir, name), tc, extra...)
	if err != nil {
		return system{}, err
	}
	if tc != nil {
		version += "; TLS on the API, mutual TLS on Raft and between nodes, client certificates (ECDSA P-256)"
	}
	var rounds func(context.Context) (roundCounters, error)
	if !commitPerBatch {
		rounds = c.roundCounters
	}
	return system{
		rounds:       rounds,
		followerPids: c.followerPids,
		name:         name,
		version:      version,
		newMinter: func(ctx context.Context) (minter, error) {
			return newFencegateMinter(ctx, c, resource, leaderFirst)
		},
		pids: c.procs.pids,
	}, nil
}

func setupEtcd(ctx context.Context, g *proc.Group, etcdBin, dir, resource string, leaderFirst bool, tc *benchTLS, logf func(string, ...any)) (system, error) {
	name := "etcd" + tc.choose("", "-tls")
	logf("starting 3 etcd members%s", tc.choose("", " with TLS"))
	c, err := startEtcd(ctx, g, etcdBin, filepath.Join(dir, name), tc)
	if err != nil {
		return system{}, err
	}
	version := strings.Replace(bench.Version(ctx, etcdBin, "--version"), "etcd Version: ", "etcd ", 1) +
		" (server), go.etcd.io/etcd/client/v3 v3.6.12 (client)"
	if tc != nil {
		version += "; --client-cert-auth, --peer-client-cert-auth (ECDSA P-256)"
	}
	return system{
		name:    name,
		version: version,
		newMinter: func(ctx context.Context) (minter, error) {
			endpoints := c.clientURLs
			if leaderFirst {
				leader, err := c.leaderURL(ctx)
				if err != nil {
					return nil, err
				}
				endpoints = []string{leader}
			}
			return newEtcdMinter(endpoints, c.tls, resource)
		},
		pids: c.procs.pids,
	}, nil
}
