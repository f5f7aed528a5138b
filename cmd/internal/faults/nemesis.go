package faults

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

// ClientProc is a workload client process as the nemesis sees it: a process
// and what it last did (the campaign updates it from the client's events).
type ClientProc struct {
	Name string
	Proc *proc.Proc

	mu       sync.Mutex
	last     string
	writeAt  time.Time
	acquired int
	commits  int
	token    int64 // of the client's latest grant
}

// Observe records the client's latest event.
func (c *ClientProc) Observe(e worker.Event) {
	c.mu.Lock()
	c.last = e.Kind
	switch e.Kind {
	case KindAcquireOK:
		c.acquired++
		c.writeAt = time.Now().Add(time.Duration(e.Work))
		c.token = e.Token
	case KindTxnOK:
		c.commits++
	}
	c.mu.Unlock()
}

func (c *ClientProc) counts() (acquired, commits int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acquired, c.commits
}

// progress sums the lock grants and commits of the clients other than skip.
func progress(clients []*ClientProc, skip *ClientProc) (acquired, commits int) {
	for _, c := range clients {
		if c != skip {
			a, m := c.counts()
			acquired += a
			commits += m
		}
	}
	return acquired, commits
}

// Holding reports whether the client holds the lock and has not yet begun
// its transaction: the moment a pause hurts most.
func (c *ClientProc) Holding() bool { return c.HoldingFor(0) }

// HoldingFor reports whether the client holds the lock and will not begin
// its transaction for at least d.
func (c *ClientProc) HoldingFor(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last == KindAcquireOK && time.Until(c.writeAt) >= d
}

// Nemesis injects faults into a running stack and records each one as a
// window (fault-start, fault-end) in the history.
type Nemesis struct {
	stack   *Stack
	clients []*ClientProc
	rec     *Recorder
	rng     *rand.Rand
	ttl     time.Duration
	log     *slog.Logger
	counts  map[string]int
	countMu sync.Mutex
}

// NewNemesis returns a nemesis whose random choices all come from seed.
func NewNemesis(stack *Stack, clients []*ClientProc, rec *Recorder, seed int64, ttl time.Duration, logger *slog.Logger) *Nemesis {
	if logger == nil {
		logger = slog.Default()
	}
	return &Nemesis{
		stack: stack, clients: clients, rec: rec, ttl: ttl,
		rng:    rand.New(rand.NewPCG(uint64(seed), 0x6e656d65736973)),
		log:    logger.With("component", "nemesis"),
		counts: map[string]int{},
	}
}

// Counts returns how many times each fault was injected.
func (n *Nemesis) Counts() map[string]int {
	n.countMu.Lock()
	defer n.countMu.Unlock()
	out := map[string]int{}
	for k, v := range n.counts {
		out[k] = v
	}
	return out
}

// RunRandom injects faults drawn from faults (each as often as its
// Fault.Weight says) until ctx ends, with a short random gap between them.
// The first fault is one that can make the lock double-held by itself
// (Fault.DoubleHold), when the list has one, so that every run bites.
func (n *Nemesis) RunRandom(ctx context.Context, faults []string) error {
	var doubleHolders []string
	for _, f := range faults {
		if faultByName[f].DoubleHold {
			doubleHolders = append(doubleHolders, f)
		}
	}
	first := true
	for ctx.Err() == nil {
		if !poll.Sleep(ctx, time.Duration(200+n.rng.IntN(600))*time.Millisecond) {
			break
		}
		pool := weighted(faults)
		if first && len(doubleHolders) > 0 {
			pool = doubleHolders
		}
		first = false
		if err := n.Inject(ctx, pool[n.rng.IntN(len(pool))]); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// RunList injects the faults in order: the form of a named regression
// scenario. Before each fault it waits until the system has recovered from
// the previous one (a client committed since), then one TTL more.
func (n *Nemesis) RunList(ctx context.Context, faults []string) error {
	for _, f := range faults {
		_, before := progress(n.clients, nil)
		_ = poll.Until(ctx, "a commit", 20*time.Millisecond, 30*time.Second, func(context.Context) error {
			if _, now := progress(n.clients, nil); now > before {
				return nil
			}
			return fmt.Errorf("no client committed since the last fault")
		})
		if !poll.Sleep(ctx, n.ttl) {
			return ctx.Err()
		}
		if err := n.Inject(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// Inject applies one fault, holds it, heals it, and records the window.
func (n *Nemesis) Inject(ctx context.Context, fault string) error {
	f, ok := faultByName[fault]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownFault, fault)
	}
	if err := f.inject(n, ctx); err != nil {
		return fmt.Errorf("inject %s: %w", fault, err)
	}
	return nil
}

func (n *Nemesis) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(n.rng.Int64N(int64(d)))
}

// window records fault on target from now until heal returns.
func (n *Nemesis) window(ctx context.Context, fault, target, detail string, inject func() error, hold time.Duration, heal func() error) error {
	return n.windowUntil(ctx, fault, target, detail, inject, func() { poll.Sleep(ctx, hold) }, heal)
}

// windowUntil is window with a hold that lasts until wait returns.
func (n *Nemesis) windowUntil(ctx context.Context, fault, target, detail string, inject func() error, wait func(), heal func() error) error {
	n.countMu.Lock()
	n.counts[fault]++
	n.countMu.Unlock()
	n.log.Info("fault", "fault", fault, "target", target, "detail", detail)
	_ = n.rec.Record(worker.Event{Client: "nemesis", Kind: KindFaultStart, Fault: fault, Target: target, Detail: detail})
	ierr := inject()
	// A fault is always healed, even when the run is ending.
	wait()
	herr := heal()
	_ = n.rec.Record(worker.Event{Client: "nemesis", Kind: KindFaultEnd, Fault: fault, Target: target})
	if ierr != nil {
		return ierr
	}
	return herr
}

func (n *Nemesis) pause(ctx context.Context, fault, target string, p *proc.Proc, hold time.Duration) error {
	return n.window(ctx, fault, target, "", p.Pause, hold, p.Resume)
}

// holder waits up to 5s for a client that holds the lock and will not
// write for at least ahead (starting the search at a random client) and
// returns it, or a random client.
func (n *Nemesis) holder(ctx context.Context, ahead time.Duration) *ClientProc {
	pick := n.rng.IntN(len(n.clients))
	var target *ClientProc
	_ = poll.Until(ctx, "a lock holder", 20*time.Millisecond, 5*time.Second, func(context.Context) error {
		for i := range n.clients {
			c := n.clients[(pick+i)%len(n.clients)]
			if c.HoldingFor(ahead) && c.Proc.Running() && !c.Proc.Paused() {
				target = c
				return nil
			}
		}
		return fmt.Errorf("no client holds the lock")
	})
	if target == nil {
		target = n.clients[pick]
	}
	return target
}

// pauseClient pauses a lock holder for at least twice the TTL and then
// until another client has been granted the lock (at most maxClientPause):
// a pause that long outlives the lease however slowly the rest of the
// system recovers from earlier faults.
func (n *Nemesis) pauseClient(ctx context.Context) error {
	hold := n.ttl*2 + n.jitter(n.ttl)
	target := n.holder(ctx, 0)
	before, _ := progress(n.clients, target)
	wait := func() {
		poll.Sleep(ctx, hold)
		_ = poll.Until(ctx, "another lock holder", 20*time.Millisecond, maxClientPause-hold, func(context.Context) error {
			if now, _ := progress(n.clients, target); now > before {
				return nil
			}
			return fmt.Errorf("no other client took the lock yet")
		})
	}
	return n.windowUntil(ctx, FaultPauseClient, target.Name, "", target.Proc.Pause, wait, target.Proc.Resume)
}

// maxClientPause caps a client's pause.
const maxClientPause = 15 * time.Second

// redisVictims picks the masters a Redis fault hits: the only one, or a
// majority of Redlock's masters (a fault on a minority cannot grant the
// lock twice). It first waits for a holder that will keep working for a
// while, so that the fault hits a held lock and another client can be
// granted it before the holder writes.
func (n *Nemesis) redisVictims(ctx context.Context) ([]*RedisNode, string) {
	n.holder(ctx, n.ttl/8)
	k := len(n.stack.Redis)/2 + 1
	var out []*RedisNode
	var names []string
	perm := n.rng.Perm(len(n.stack.Redis))[:k]
	sort.Ints(perm)
	for _, i := range perm {
		out = append(out, n.stack.Redis[i])
		names = append(names, n.stack.Redis[i].Name)
	}
	return out, strings.Join(names, ",")
}

func (n *Nemesis) pauseLeader(ctx context.Context) error {
	hold := 2*time.Second + n.jitter(2*time.Second)
	l, err := n.stack.WaitLeader(ctx, 20*time.Second)
	if err != nil {
		return nil // no leader to pause: the cluster is already recovering
	}
	return n.pause(ctx, FaultPauseLeader, l.ID, l.Proc, hold)
}

func (n *Nemesis) pauseRedis(ctx context.Context) error {
	r := n.stack.Redis[n.rng.IntN(len(n.stack.Redis))]
	return n.pause(ctx, FaultPauseRedis, r.Name, r.Proc, n.ttl*2+n.jitter(n.ttl))
}

func (n *Nemesis) killTokens(ctx context.Context, fault string, k int) error {
	down := 300*time.Millisecond + n.jitter(1500*time.Millisecond)
	perm := n.rng.Perm(len(n.stack.Tokens))[:k]
	sort.Ints(perm)
	var names []string
	var nodes []*TokenNode
	for _, i := range perm {
		nodes = append(nodes, n.stack.Tokens[i])
		names = append(names, n.stack.Tokens[i].ID)
	}
	return n.window(ctx, fault, strings.Join(names, ","), "", func() error {
		for _, t := range nodes {
			if err := t.Proc.Kill(); err != nil {
				return err
			}
		}
		return nil
	}, down, func() error {
		for _, t := range nodes {
			if err := t.Proc.Start(); err != nil {
				return err
			}
		}
		return nil
	})
}

func (n *Nemesis) killRedis(ctx context.Context) error {
	rs, names := n.redisVictims(ctx)
	// Restarted at once, without persistence: the keys, and the locks,
	// are gone although their holders still believe in them.
	return n.window(ctx, FaultKillRedis, names, "restart without persistence", func() error {
		for _, r := range rs {
			if err := r.Proc.Restart(); err != nil {
				return err
			}
		}
		return nil
	}, 0, func() error {
		for _, r := range rs {
			if err := r.WaitReady(context.WithoutCancel(ctx)); err != nil {
				return err
			}
		}
		return nil
	})
}

func (n *Nemesis) killProxy(ctx context.Context) error {
	p := n.stack.Proxies[n.rng.IntN(len(n.stack.Proxies))]
	down := 200*time.Millisecond + n.jitter(800*time.Millisecond)
	return n.window(ctx, FaultKillProxy, p.Name, "", p.Proc.Kill, down, p.Proc.Start)
}

func (n *Nemesis) killRelay(ctx context.Context) error {
	down := 50*time.Millisecond + n.jitter(500*time.Millisecond)
	return n.window(ctx, FaultKillRelay, "relay", "", n.stack.Relay.Kill, down, n.stack.Relay.Start)
}

// cut cuts (or heals) the links between a and b in both directions.
func cut(a, b *TokenNode, on bool) {
	for _, r := range []interface {
		Cut()
		Heal()
	}{a.Out[b.ID], b.Out[a.ID]} {
		if on {
			r.Cut()
		} else {
			r.Heal()
		}
	}
}

func (n *Nemesis) partitionLeader(ctx context.Context) error {
	hold := 2*time.Second + n.jitter(2*time.Second)
	l, err := n.stack.WaitLeader(ctx, 20*time.Second)
	if err != nil {
		return nil
	}
	links := func(on bool) func() error {
		return func() error {
			for _, t := range n.stack.Tokens {
				if t != l {
					cut(l, t, on)
				}
			}
			return nil
		}
	}
	return n.window(ctx, FaultPartitionLeader, l.ID, "isolated old leader", links(true), hold, links(false))
}

func (n *Nemesis) partitionRing(ctx context.Context) error {
	hold := 2*time.Second + n.jitter(2*time.Second)
	p := n.rng.Perm(3)
	a, b, c := n.stack.Tokens[p[0]], n.stack.Tokens[p[1]], n.stack.Tokens[p[2]]
	target := fmt.Sprintf("%s|%s via %s", a.ID, c.ID, b.ID)
	return n.window(ctx, FaultPartitionRing, target, "majority ring",
		func() error { cut(a, c, true); return nil }, hold,
		func() error { cut(a, c, false); return nil })
}

func (n *Nemesis) clockRedis(ctx context.Context) error {
	rs, names := n.redisVictims(ctx)
	for _, r := range rs {
		if r.Clock == nil {
			return fmt.Errorf("%w: %s runs without it", ErrNoClockShim, r.Name)
		}
	}
	jump := n.ttl*3 + n.jitter(n.ttl)
	// The clock stays ahead after the window: real clocks that jump forward
	// rarely jump back, and a backward jump would only lengthen leases.
	return n.window(ctx, FaultClockRedis, names, "+"+jump.String(), func() error {
		for _, r := range rs {
			r.skew += jump
			if err := r.Clock.Set(r.skew); err != nil {
				return err
			}
		}
		return nil
	}, n.ttl, func() error { return nil })
}

func (n *Nemesis) slowDisk(ctx context.Context) error {
	if n.stack.Disk == nil {
		return ErrNoDiskThrottle
	}
	hold := 2*time.Second + n.jitter(2*time.Second)
	l, err := n.stack.WaitLeader(ctx, 20*time.Second)
	if err != nil {
		return nil
	}
	pid := l.Proc.Pid()
	return n.window(ctx, FaultSlowDisk, l.ID, fmt.Sprintf("%d writes/s", slowDiskIOPS),
		func() error { return n.stack.Disk.Slow(pid) }, hold,
		func() error { return n.stack.Disk.Restore(pid) })
}

// pruneMarks prunes the run's marks (pgfence.Prune, as the administrator)
// to a floor drawn from the tokens the clients were last granted: half the
// time the newest, else any of them, so that a prune races fences of
// stale and current holders alike, and often refuses the newest holder
// itself. The floor travels in the fault-start event (Value), for
// checkFloor.
func (n *Nemesis) pruneMarks(ctx context.Context, rng *rand.Rand) error {
	var toks []int64
	for _, c := range n.clients {
		c.mu.Lock()
		if c.token > 0 {
			toks = append(toks, c.token)
		}
		c.mu.Unlock()
	}
	if len(toks) == 0 || n.stack.DB == nil {
		return nil
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i] < toks[j] })
	// Half the prunes take the newest grant: the mark (the newest commit)
	// is then usually at or below the floor and deleted, in a race with
	// the fences of every holder, the newest one's included.
	floor := toks[len(toks)-1]
	if rng.IntN(2) == 0 {
		floor = toks[rng.IntN(len(toks))]
	}
	var detail string
	n.countMu.Lock()
	n.counts[FaultPruneMarks]++
	n.countMu.Unlock()
	_ = n.rec.Record(worker.Event{Client: "nemesis", Kind: KindFaultStart, Fault: FaultPruneMarks, Target: n.stack.DBName, Value: floor,
		Detail: fmt.Sprintf("floor %d of granted tokens %d..%d", floor, toks[0], toks[len(toks)-1])})
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(pctx, n.stack.DB.AdminDSN)
	if err == nil {
		var res pgfence.PruneResult
		res, err = pgfence.Prune(pctx, conn, floor, pgfence.PruneOptions{Batch: 1 + rng.IntN(4)})
		detail = fmt.Sprintf("floor %d: %d marks deleted, %d left locked, %v", res.FloorAfter, res.Deleted, res.Left, res.Took.Round(time.Millisecond))
		_ = conn.Close(pctx)
	}
	n.log.Info("fault", "fault", FaultPruneMarks, "target", n.stack.DBName, "detail", detail, "err", err)
	_ = n.rec.Record(worker.Event{Client: "nemesis", Kind: KindFaultEnd, Fault: FaultPruneMarks, Target: n.stack.DBName, Value: floor, Detail: detail})
	return err
}

// RunPrunes prunes the marks (as FaultPruneMarks does) every 0.5 to 1.5
// times every until ctx ends, beside the faults RunRandom or RunList
// inject, with random choices of its own drawn from seed.
func (n *Nemesis) RunPrunes(ctx context.Context, every time.Duration, seed int64) error {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7072756e65))
	for {
		if !poll.Sleep(ctx, every/2+time.Duration(rng.Int64N(int64(every)))) {
			return nil
		}
		if err := n.pruneMarks(ctx, rng); err != nil && ctx.Err() == nil {
			return fmt.Errorf("prune-marks: %w", err)
		}
	}
}
