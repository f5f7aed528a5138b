package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/internal/proc"
)

// Config configures a campaign. Zero values take the defaults stated on
// each field.
type Config struct {
	// Binary is the fencegate executable the processes run. The default is
	// the running executable.
	Binary string
	// Runs is the number of runs. The default is 5.
	Runs int
	// Seed seeds run i's schedule with Seed+i. The default is 1.
	Seed int64
	// Duration is how long the nemesis injects faults in each run. The
	// default is 20s.
	Duration time.Duration
	// ReportDir receives one directory per run and summary.txt. The default
	// is "faults-report".
	ReportDir string
	// Redlock runs five Redis masters and Redlock instead of one Redis.
	// The default is false (one master).
	Redlock bool
	// Faults are the faults the nemesis draws from. The default is AllFaults.
	Faults []string
	// Scenario, when set, replaces the random schedule: these faults are
	// injected in order, once each, and the run ends after the last.
	Scenario []string
	// PruneEvery, when positive, prunes the run's marks about this often
	// (FaultPruneMarks) beside the faults, for the whole of the nemesis's
	// time. The default (zero) prunes only when prune-marks is drawn.
	PruneEvery time.Duration
	// Clients is the number of workload client processes. The default is 4.
	Clients int
	// TTL is the lock's TTL. The default is 1s.
	TTL time.Duration
	// Work is the most a client waits between getting its token and
	// writing. The default is TTL/4.
	Work time.Duration
	// PostgreSQL is the DSN of a superuser of the server each run creates
	// its database and its two roles on (dropped when the run ends). The
	// default is pgdb.DefaultAdminDSN.
	PostgreSQL string
	// Logger receives progress logs. The default is
	// slog.Default().With("component", "faults").
	Logger *slog.Logger
	// Out receives one line per finished run. The default is io.Discard.
	Out io.Writer
}

func (c *Config) defaults() error {
	if c.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the fencegate executable: %w", err)
		}
		c.Binary = exe
	}
	if c.Runs <= 0 {
		c.Runs = 5
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.ReportDir == "" {
		c.ReportDir = "faults-report"
	}
	if len(c.Faults) == 0 {
		c.Faults = append([]string(nil), AllFaults...)
	}
	if c.Clients <= 0 {
		c.Clients = 4
	}
	if c.TTL <= 0 {
		c.TTL = time.Second
	}
	if c.Work <= 0 {
		c.Work = c.TTL / 4
	}
	if c.PostgreSQL == "" {
		c.PostgreSQL = pgdb.DefaultAdminDSN
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Logger = c.Logger.With("component", "faults")
	if c.Out == nil {
		c.Out = io.Discard
	}
	return nil
}

// RunReport is the outcome of one run.
type RunReport struct {
	Index  int
	Seed   int64
	Dir    string
	Result Result
	// TokensOK is porcupine's verdict on the token history.
	TokensOK bool
	Faults   map[string]int
}

// Summary adds up a campaign's runs.
type Summary struct {
	Runs          int
	Faults        int
	DoubleHolds   int
	StaleRejected int
	StaleAccepted int
	// TokenViolations counts runs whose token history porcupine rejected.
	TokenViolations int
	// Failed lists "run N: failure" for every failed check.
	Failed  []string
	Reports []RunReport
}

// Line is the campaign's summary line.
func (s *Summary) Line() string {
	return fmt.Sprintf("runs %d, faults injected %d, double-holds seen %d, stale writes rejected %d, stale writes accepted %d",
		s.Runs, s.Faults, s.DoubleHolds, s.StaleRejected, s.StaleAccepted)
}

// OK reports whether every run passed every check.
func (s *Summary) OK() bool { return len(s.Failed) == 0 }

func (s *Summary) add(r RunReport) {
	s.Runs++
	s.Faults += r.Result.Faults
	s.DoubleHolds += r.Result.DoubleHolds
	s.StaleRejected += r.Result.StaleRejected
	s.StaleAccepted += r.Result.StaleAccepted
	if !r.TokensOK {
		s.TokenViolations++
	}
	for _, f := range r.Result.Failures {
		s.Failed = append(s.Failed, fmt.Sprintf("run %d (seed %d): %s", r.Index, r.Seed, f))
	}
	s.Reports = append(s.Reports, r)
}

// Run runs a campaign: cfg.Runs runs, each on a fresh stack, each checked
// and reported under cfg.ReportDir. It returns an error wrapping
// ErrCheckFailed when a check failed or a run could not be carried out (a
// process that would not start), after the remaining runs.
func Run(ctx context.Context, cfg Config) (*Summary, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.ReportDir, 0o755); err != nil {
		return nil, fmt.Errorf("create report dir: %w", err)
	}
	shim, shimErr := BuildClockShim(cfg.ReportDir)
	if shimErr != nil {
		cfg.Logger.Warn("Redis clock jumps disabled", "err", shimErr)
		cfg.Faults = without(cfg.Faults, FaultClockRedis)
	}
	slowDisk := slices.Contains(cfg.Faults, FaultSlowDisk) || slices.Contains(cfg.Scenario, FaultSlowDisk)
	if slowDisk {
		d, err := NewDiskThrottle(filepath.Join(cfg.ReportDir, "disk-check"))
		if err != nil {
			cfg.Logger.Warn("slow disks disabled", "err", err)
			cfg.Faults = without(cfg.Faults, FaultSlowDisk)
			slowDisk = false
		} else {
			d.Close()
		}
		os.Remove(filepath.Join(cfg.ReportDir, "disk-check"))
	}
	sum := &Summary{}
	var runErr error
	for i := range cfg.Runs {
		seed := cfg.Seed + int64(i)
		rep, err := runOne(ctx, cfg, i+1, seed, shim, slowDisk)
		if err != nil {
			if ctx.Err() != nil {
				runErr = fmt.Errorf("run %d (seed %d): %w", i+1, seed, err)
				break
			}
			// A run that could not be carried out (a process that would
			// not start) fails, and the campaign goes on.
			rep.Result.failf("run not carried out: %v", err)
			rep.TokensOK = true
			_ = writeRunReport(rep.Dir, rep, DBState{})
		}
		sum.add(rep)
		status := "ok"
		if !rep.Result.OK() || !rep.TokensOK {
			status = "FAILED"
		}
		fmt.Fprintf(cfg.Out, "run %d seed %d: %s: faults %d, double-holds %d, stale rejected %d, stale accepted %d, committed %d, effects delivered once %d, porcupine %s  (%s)\n",
			rep.Index, rep.Seed, status, rep.Result.Faults, rep.Result.DoubleHolds, rep.Result.StaleRejected,
			rep.Result.StaleAccepted, rep.Result.Committed, rep.Result.Effects, okWord(rep.TokensOK), rep.Dir)
		if ctx.Err() != nil {
			break
		}
	}
	text := sum.Line() + "\n"
	for _, f := range sum.Failed {
		text += "FAIL " + f + "\n"
	}
	if err := os.WriteFile(filepath.Join(cfg.ReportDir, "summary.txt"), []byte(text), 0o644); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("write summary: %w", err))
	}
	if runErr == nil && ctx.Err() != nil {
		runErr = ctx.Err()
	}
	if runErr == nil && !sum.OK() {
		runErr = fmt.Errorf("%w: %d failure(s), first: %s", ErrCheckFailed, len(sum.Failed), sum.Failed[0])
	}
	return sum, runErr
}

func okWord(ok bool) string {
	if ok {
		return "Ok"
	}
	return "Illegal"
}

func without(list []string, drop string) []string {
	var out []string
	for _, f := range list {
		if f != drop {
			out = append(out, f)
		}
	}
	return out
}

// runOne carries out one run and writes its report directory.
func runOne(ctx context.Context, cfg Config, index int, seed int64, shim string, slowDisk bool) (RunReport, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.ReportDir, fmt.Sprintf("run-%03d", index)))
	if err != nil {
		return RunReport{}, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return RunReport{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return RunReport{}, err
	}
	rep := RunReport{Index: index, Seed: seed, Dir: dir}
	log := cfg.Logger.With("run", index, "seed", seed)
	redisN := 1
	if cfg.Redlock {
		redisN = 5
	}
	stack, err := StartStack(ctx, StackConfig{Binary: cfg.Binary, Dir: dir, PostgreSQL: cfg.PostgreSQL,
		Redis: redisN, ClockShim: shim, SlowDisk: slowDisk, Logger: log})
	if err != nil {
		return rep, fmt.Errorf("start stack: %w", err)
	}
	defer stack.Close()

	hf, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return rep, fmt.Errorf("create history: %w", err)
	}
	defer hf.Close()
	rec := NewRecorder(hf, true)

	clients, firstOK := startClients(stack, cfg, seed, rec)
	select {
	case <-firstOK:
	case <-time.After(30 * time.Second):
		return rep, fmt.Errorf("no transaction committed within 30s of the start: the stack does not work (see %s/logs)", dir)
	case <-ctx.Done():
		return rep, ctx.Err()
	}

	nem := NewNemesis(stack, clients, rec, seed, cfg.TTL, log)
	nctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	if len(cfg.Scenario) > 0 {
		cancel()
		nctx, cancel = context.WithCancel(ctx)
	}
	pruneErr := make(chan error, 1)
	if cfg.PruneEvery > 0 {
		go func() { pruneErr <- nem.RunPrunes(nctx, cfg.PruneEvery, seed) }()
	} else {
		pruneErr <- nil
	}
	if len(cfg.Scenario) > 0 {
		err = nem.RunList(nctx, cfg.Scenario)
	} else {
		err = nem.RunRandom(nctx, cfg.Faults)
	}
	cancel()
	if perr := <-pruneErr; err == nil {
		err = perr
	}
	if err != nil {
		return rep, fmt.Errorf("nemesis: %w", err)
	}
	rep.Faults = nem.Counts()
	// Let the clients run on a healed system for a while: a paused client
	// that was resumed last gets to try its stale write.
	poll.Sleep(ctx, 2*cfg.TTL)
	for _, c := range clients {
		_ = c.Proc.Stop(5 * time.Second)
	}

	state, err := stack.ReadState(context.WithoutCancel(ctx))
	if err != nil {
		return rep, err
	}
	evs := rec.Events()
	rep.Result = Check(evs, state)
	rep.TokensOK, err = CheckTokenOrder(evs, filepath.Join(dir, "tokens.html"))
	if err != nil {
		return rep, err
	}
	if !rep.TokensOK {
		rep.Result.failf("tokens: porcupine found the tokens not increasing in real-time order (see tokens.html)")
	}
	if err := writeRunReport(dir, rep, state); err != nil {
		return rep, err
	}
	log.Info("run done", "ok", rep.Result.OK(), "faults", rep.Result.Faults, "double_holds", rep.Result.DoubleHolds)
	return rep, nil
}

// startClients starts the workload client processes. Their events feed the
// recorder and the nemesis's view of who holds the lock; firstOK closes at
// the first committed transaction.
func startClients(stack *Stack, cfg Config, seed int64, rec *Recorder) ([]*ClientProc, <-chan struct{}) {
	firstOK := make(chan struct{})
	var once sync.Once
	var out []*ClientProc
	for i := range cfg.Clients {
		cp := &ClientProc{Name: "c" + strconv.Itoa(i+1)}
		env, err := worker.Env(ClientConfig{ID: cp.Name, Tokens: stack.TokenURLs(), Redis: stack.RedisAddrs(),
			DSNs: stack.ProxyDSNs(), Resource: Resource, TTL: cfg.TTL, Work: cfg.Work, Seed: seed*100 + int64(i)})
		if err != nil {
			cfg.Logger.Error("start client", "client", cp.Name, "err", err)
			continue
		}
		sink := func(line []byte) {
			e, ok := worker.Decode(line)
			if !ok {
				return
			}
			cp.Observe(e)
			_ = rec.Record(e)
			if e.Kind == KindTxnOK {
				once.Do(func() { close(firstOK) })
			}
		}
		cp.Proc = stack.Sup.Add("client-"+cp.Name, cfg.Binary, worker.Args(worker.FaultsClient),
			proc.WithStdoutLines(sink), proc.WithEnv(append(stack.ClientEnv(), env)...))
		out = append(out, cp)
	}
	for _, cp := range out {
		if err := cp.Proc.Start(); err != nil {
			cfg.Logger.Error("start client", "client", cp.Name, "err", err)
		}
	}
	return out, firstOK
}
