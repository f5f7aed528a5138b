package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/cmd/internal/timeline"
	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/jackc/pgx/v5"
)

// Config configures a paused-holder demo.
type Config struct {
	// Binary is the fencegate executable run for the clients. The default is
	// this process's own executable.
	Binary string
	// Redlock locks on five Redis masters the demo starts, and makes the
	// double grant by restarting one of them without persistence. The default
	// is false: one Redis, and a SIGSTOP past the TTL.
	Redlock bool
	// TTL is the lock's time to live. The default is 1s, 5s with Redlock.
	TTL time.Duration
	// Postgres is a DSN of a PostgreSQL server to use (a role that may create
	// databases). The default is to find one as "fencegate dev" does.
	Postgres string
	// Redis is host:port or redis:// URL of the Redis server to use in
	// single-node mode. The default is to find one as "fencegate dev" does.
	Redis string
	// Picture is the SVG file written. The default is
	// "fencegate-data/paused-holder.svg" (DefaultPicture), or
	// DefaultRedlockPicture with Redlock.
	Picture string
	// Out receives the terminal timeline and the verdict. The default is io.Discard.
	Out io.Writer
	// Logger gets progress logs. The default is slog.Default().
	Logger *slog.Logger
	// ServiceLogger gets the logs of the token nodes and the proxy the demo
	// runs. The default discards them.
	ServiceLogger *slog.Logger
}

// Order is the demo's order 42 as found in the database after a run.
type Order struct {
	State        string
	Charges      int   // rows in charges for the order
	ChargedCents int64 // their sum
	AmountCents  int64 // what the order costs
}

// Write is the outcome of one client's charge.
type Write struct {
	Attempted bool
	OK        bool
	SQLState  string // of the error, when it failed
	Message   string
}

// Run is one pass of the scenario.
type Run struct {
	Fenced    bool  // each transaction starts with fencegate.fence (Lock.InTx)
	Protected bool  // the tables are protected (fencegate.protect)
	Proxy     bool  // the clients connect through the proxy, else straight to PostgreSQL
	Token1    int64 // client 1's token
	Token2    int64 // client 2's token
	Write1    Write // client 1's (stale) write
	Write2    Write // client 2's write
	Held1     bool  // client 1 believed its lease valid just before writing
	// Masters is, for Redlock, the value of the lock key on each master
	// right after client 2's grant ("" where absent).
	Masters  []string
	Order    Order
	Timeline *timeline.Timeline
}

// Result is what the demo observed.
type Result struct {
	Unprotected Run    // (a) straight to PostgreSQL, unprotected tables, no fence
	Proxied     Run    // (b) through the proxy, protected tables, fenced
	Direct      Run    // (c) straight to PostgreSQL, protected tables, fenced
	Picture     string // absolute path of the SVG written
}

// DoubleGrant reports, for Redlock, whether the masters showed two holders
// at once right after client 2's grant: a majority with client 2's value
// and client 1's value still on others.
func (r *Run) DoubleGrant() bool {
	count := map[string]int{}
	for _, v := range r.Masters {
		if v != "" {
			count[v]++
		}
	}
	if len(count) != 2 {
		return false
	}
	for _, n := range count {
		if n >= len(r.Masters)/2+1 {
			return true
		}
	}
	return false
}

// StaleWriteRejected reports the demo's verdict: on the protected tables,
// through the proxy (b) and straight to PostgreSQL (c), client 1's stale
// write failed with FG001 and the order was charged exactly once.
func (r *Result) StaleWriteRejected() bool { return r.Proxied.rejected() && r.Direct.rejected() }

// rejected reports whether client 1's stale write failed with FG001 and
// the order was charged exactly once.
func (r *Run) rejected() bool {
	return r.Write1.Attempted && !r.Write1.OK && r.Write1.SQLState == fencegate.CodeStaleToken &&
		r.Order.Charges == 1 && r.Order.ChargedCents == r.Order.AmountCents
}

const orderID = 42

// resource is the lock's and the fence's resource: what the resource
// expression of the protected tables computes for order 42's rows.
const resource = "order:42"

// DefaultPicture is where the demo draws its timeline unless told otherwise:
// in the dev data directory, which "fencegate dev --reset" removes.
var DefaultPicture = filepath.Join(devstack.DefaultDataDir, "paused-holder.svg")

// DefaultRedlockPicture is DefaultPicture for the --redlock scenario.
var DefaultRedlockPicture = filepath.Join(devstack.DefaultDataDir, "paused-holder-redlock.svg")

// PausedHolder runs the scenario three times, prints the timelines and
// writes the picture: (a) straight to PostgreSQL on unprotected tables,
// (b) through the proxy on protected tables, (c) straight to PostgreSQL on
// the protected tables. The error is ErrStaleWriteAccepted when (b) or (c)
// did not reject the stale write.
func PausedHolder(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = time.Second
		if cfg.Redlock {
			// Room for a process start and a master restart inside one lease.
			cfg.TTL = 5 * time.Second
		}
	}
	if cfg.Picture == "" {
		cfg.Picture = DefaultPicture
		if cfg.Redlock {
			// One file per scenario: the Redlock run does not overwrite
			// the single-Redis picture.
			cfg.Picture = DefaultRedlockPicture
		}
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default().With("component", "demo")
	}
	if cfg.ServiceLogger == nil {
		cfg.ServiceLogger = slog.New(slog.DiscardHandler)
	}
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable: %w", err)
		}
		cfg.Binary = exe
	}
	masters := 0
	if cfg.Redlock {
		masters = 5
	}
	st, err := devstack.StartThrowaway(ctx, devstack.ThrowawayConfig{Prefix: stackPrefix, Postgres: cfg.Postgres, Redis: cfg.Redis, RedisMasters: masters,
		Logger: cfg.Logger, ServiceLogger: cfg.ServiceLogger})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	printIntro(cfg.Out, &cfg, st)

	res := &Result{}
	for _, r := range []struct {
		run  *Run
		name string
	}{
		{&res.Unprotected, "(a) straight to PostgreSQL, unprotected tables"},
		{&res.Proxied, "(b) through the proxy, protected tables"},
		{&res.Direct, "(c) straight to PostgreSQL, protected tables"},
	} {
		r.run.Protected = r.run != &res.Unprotected
		r.run.Fenced = r.run.Protected
		r.run.Proxy = r.run == &res.Proxied
		if err := runOnce(ctx, &cfg, st, r.run); err != nil {
			return nil, fmt.Errorf("run %s: %w", r.name, err)
		}
		printRun(cfg.Out, r.run)
	}

	if res.Picture, err = filepath.Abs(cfg.Picture); err != nil {
		return nil, err
	}
	if filepath.Dir(res.Picture) == mustAbs(devstack.DefaultDataDir) {
		if _, err := devstack.PrepareDataDir(devstack.DefaultDataDir); err != nil {
			return nil, err
		}
	}
	if err := writePicture(res, &cfg); err != nil {
		return nil, err
	}
	printVerdict(cfg.Out, res)
	if !res.StaleWriteRejected() {
		return res, ErrStaleWriteAccepted
	}
	return res, nil
}

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return a
}

// resetTables creates the demo's tables afresh, as the administrator, with
// order 42 unpaid; protected, they belong to the owner role and each row to
// resource 'order:<id>'. Either way the application role gets
// fenceddb.AppPrivileges on them, nothing more.
func resetTables(ctx context.Context, st *devstack.Stack, protected bool) error {
	conn, err := pgx.Connect(ctx, st.DB.AdminDSN)
	if err != nil {
		return fmt.Errorf("connect demo database: %w", err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "DROP TABLE IF EXISTS charges, orders;"+devstack.DemoTablesSQL+
		"INSERT INTO orders VALUES (42, 'Alice', 4999, 'unpaid');")
	if err != nil {
		return fmt.Errorf("create demo tables: %w", err)
	}
	for _, t := range []struct{ name, resource string }{{"orders", devstack.OrdersResource}, {"charges", devstack.ChargesResource}} {
		if protected {
			err = st.DB.Protect(ctx, conn, devstack.Protected(t.name, t.resource))
		} else {
			err = st.DB.Grant(ctx, conn, t.name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func readOrder(ctx context.Context, dsn string) (Order, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return Order{}, fmt.Errorf("connect demo database: %w", err)
	}
	defer conn.Close(context.Background())
	var o Order
	err = conn.QueryRow(ctx, `SELECT o.state, o.amount_cents, count(c.id), coalesce(sum(c.amount_cents), 0)
		FROM orders o LEFT JOIN charges c ON c.order_id = o.id WHERE o.id = $1 GROUP BY o.id`, orderID).
		Scan(&o.State, &o.AmountCents, &o.Charges, &o.ChargedCents)
	if err != nil {
		return Order{}, fmt.Errorf("read order %d: %w", orderID, err)
	}
	return o, nil
}

// runOnce plays the scenario once, as run says (Fenced, Protected, Proxy),
// and fills in the rest of run.
func runOnce(ctx context.Context, cfg *Config, st *devstack.Stack, run *Run) error {
	if err := resetTables(ctx, st, run.Protected); err != nil {
		return err
	}
	p := &pausedRun{ctx: ctx, cfg: cfg, st: st, run: run, step: 30 * time.Second}
	defer p.close()
	p.newTimeline()
	c1cfg, c2cfg, err := p.clientConfigs()
	if err != nil {
		return err
	}
	if err := p.client1Checks(&c1cfg); err != nil {
		return err
	}
	if err := p.stall(); err != nil {
		return err
	}
	if err := p.client2Charges(&c2cfg); err != nil {
		return err
	}
	if err := p.client1Charges(); err != nil {
		return err
	}
	if run.Order, err = readOrder(ctx, st.DB.AdminDSN); err != nil {
		return err
	}
	p.draw()
	return nil
}

// pausedRun is one pass of the scenario under way: the clients, the
// relays, and the events the picture is drawn from.
type pausedRun struct {
	ctx  context.Context
	cfg  *Config
	st   *devstack.Stack
	run  *Run
	tl   *timeline.Timeline
	step time.Duration // how long to wait for each event

	prefix  string // of the lock's keys
	relays  []*netfault.Relay
	c1, c2  *clientProc
	closers []func() // run in reverse order by close

	acq1, read1, chk1, w1, rel1 stamped // client 1's events
	acq2, w2, rel2              stamped // client 2's
	leaseEnd1                   time.Time
	pausedAt, resumedAt         time.Time // of client 1, without Redlock
}

// close kills the clients and closes the relays, last first.
func (p *pausedRun) close() {
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

func (p *pausedRun) newTimeline() {
	title := "(a) straight to PostgreSQL, unprotected tables, no fence"
	switch {
	case p.run.Proxy:
		title = "(b) through the fencegate proxy, protected tables, fenced by token"
	case p.run.Protected:
		title = "(c) straight to PostgreSQL (no proxy), protected tables, fenced by token"
	}
	start := time.Now()
	p.tl = timeline.New(title, start)
	p.run.Timeline = p.tl
	p.tl.AddLane("client 1", "client 2")
	if p.cfg.Redlock {
		p.tl.AddLane("Redis masters")
	}
}

// clientConfigs makes the two clients' configurations and, for Redlock,
// the relays client 1 reaches masters 4 and 5 through.
func (p *pausedRun) clientConfigs() (c1cfg, c2cfg ClientConfig, err error) {
	st, cfg := p.st, p.cfg
	// The lock's keys are the run's own: a run never meets a lease of an
	// earlier run or of another demo on the same Redis.
	p.prefix = pgdb.RandomName("fencegate:demo:") + ":lock:"
	base := ClientConfig{Tokens: st.Tokens.URLs, DB: appDSN(st, p.run.Proxy), Password: st.DB.AppPassword, Fenced: p.run.Fenced,
		Resource: resource, KeyPrefix: p.prefix, OrderID: orderID,
		TTL: cfg.TTL, Wait: 30 * time.Second, Work: min(cfg.TTL/5, 200*time.Millisecond)}
	c1cfg, c2cfg = base, base
	c1cfg.Name, c2cfg.Name = "client 1", "client 2"
	c1cfg.Redis, c2cfg.Redis = st.RedisAddrs(), st.RedisAddrs()

	// Redlock: client 1 reaches masters 4 and 5 through relays that are cut
	// while it locks, so it holds masters 1-3 only, as in antirez's example.
	if cfg.Redlock {
		for i := 3; i < 5; i++ {
			r, err := netfault.NewRelay("127.0.0.1:0", st.Masters[i].Addr)
			if err != nil {
				return c1cfg, c2cfg, err
			}
			p.closers = append(p.closers, func() { _ = r.Close() })
			r.Cut()
			p.relays = append(p.relays, r)
			c1cfg.Redis = append([]string(nil), c1cfg.Redis...)
			c1cfg.Redis[i] = r.Addr()
		}
	}
	return c1cfg, c2cfg, nil
}

// client1Checks starts client 1 and waits until it took the lock, read
// the order and checked its lease.
func (p *pausedRun) client1Checks(c1cfg *ClientConfig) error {
	c1, err := startClient(p.cfg.Binary, c1cfg)
	if err != nil {
		return err
	}
	p.c1 = c1
	p.closers = append(p.closers, c1.kill)
	c1.stuck = func() string { return sessions(p.st) }
	if p.acq1, err = c1.next(p.ctx, p.step, evAcquired); err != nil {
		return err
	}
	p.run.Token1 = p.acq1.Token
	p.leaseEnd1 = p.acq1.at.Add(p.cfg.TTL)
	if p.read1, err = c1.next(p.ctx, p.step, evRead); err != nil {
		return err
	}
	if p.chk1, err = c1.next(p.ctx, p.step, evChecked); err != nil {
		return err
	}
	p.run.Held1 = p.chk1.Held
	return nil
}

// stall takes client 1's lock from under it: with Redlock, master 3
// restarts without persistence; else client 1 is frozen right before its
// write and stays frozen while its lease expires and client 2 does its work.
func (p *pausedRun) stall() error {
	if p.cfg.Redlock {
		for _, r := range p.relays {
			r.Heal()
		}
		// Master 3 crashes and comes back empty: client 1's key on it is gone.
		crash := time.Now()
		if err := p.st.Masters[2].Kill(); err != nil {
			return err
		}
		if err := p.st.Masters[2].Restart(p.ctx); err != nil {
			return fmt.Errorf("restart Redis master 3: %w", err)
		}

		p.tl.Mark("Redis masters", timeline.Note, crash, "master 3 restarted without persistence")
		return nil
	}
	if err := p.c1.pause(10 * time.Second); err != nil {
		return fmt.Errorf("stop client 1: %w", err)
	}
	p.pausedAt = time.Now()
	return p.c1.send(cmdWrite)
}

// client2Charges starts client 2 and lets it take the lock, charge the
// order, release the lock and exit.
func (p *pausedRun) client2Charges(c2cfg *ClientConfig) error {
	ctx, step, c1 := p.ctx, p.step, p.c1
	c2, err := startClient(p.cfg.Binary, c2cfg)
	if err != nil {
		return err
	}
	p.c2 = c2
	p.closers = append(p.closers, c2.kill)
	c2.stuck = func() string { return "; client 1's process state " + c1.state() + sessions(p.st) }
	if p.acq2, err = c2.next(ctx, step, evAcquired); err != nil {
		return err
	}
	p.run.Token2 = p.acq2.Token
	if p.cfg.Redlock {
		if p.run.Masters, err = lockHolders(ctx, p.st, p.prefix+resource); err != nil {
			return err
		}
	}
	if _, err := c2.next(ctx, step, evRead); err != nil {
		return err
	}
	if err := c2.send(cmdWrite); err != nil {
		return err
	}
	if _, err := c2.next(ctx, step, evChecked); err != nil {
		return err
	}
	if p.w2, err = c2.next(ctx, step, evWrote, evSkipped); err != nil {
		return err
	}
	p.run.Write2 = writeOf(p.w2)
	if p.rel2, err = c2.next(ctx, step, evReleased); err != nil {
		return err
	}
	return c2.wait(ctx, step)
}

// client1Charges lets client 1 go on with its stale write, release and
// exit.
func (p *pausedRun) client1Charges() error {
	ctx, step, c1 := p.ctx, p.step, p.c1
	if p.cfg.Redlock {
		if err := c1.send(cmdWrite); err != nil {
			return err
		}
	} else {
		p.resumedAt = time.Now()
		if err := c1.signal(syscall.SIGCONT); err != nil {
			return fmt.Errorf("continue client 1: %w", err)
		}
	}
	var err error
	if p.w1, err = c1.next(ctx, step, evWrote, evSkipped); err != nil {
		return err
	}
	p.run.Write1 = writeOf(p.w1)
	if p.rel1, err = c1.next(ctx, step, evReleased); err != nil {
		return err
	}
	return c1.wait(ctx, step)
}

// draw puts the run's events on its timeline.
func (p *pausedRun) draw() {
	tl, run := p.tl, p.run
	acq1, read1, chk1, w1, rel1 := p.acq1, p.read1, p.chk1, p.w1, p.rel1
	acq2, w2, rel2 := p.acq2, p.w2, p.rel2
	leaseEnd1 := p.leaseEnd1
	tl.Span("client 1", timeline.Hold, acq1.at, rel1.at, fmt.Sprintf("token %d", run.Token1))
	tl.Span("client 2", timeline.Hold, acq2.at, rel2.at, fmt.Sprintf("token %d", run.Token2))
	tl.Span("client 2", timeline.Lease, acq2.at, rel2.at, "")
	if p.cfg.Redlock {
		if leaseEnd1.After(rel1.at) {
			leaseEnd1 = rel1.at
		}
		tl.Span("client 1", timeline.Lease, acq1.at, leaseEnd1, "")
		tl.Mark("client 2", timeline.Note, acq2.at, fmt.Sprintf("granted by masters 3-5 while client 1's key is on %s", holdersText(run.Masters, run.Masters[0])))
	} else {
		if leaseEnd1.After(acq2.at) {
			leaseEnd1 = acq2.at
		}
		tl.Span("client 1", timeline.Lease, acq1.at, leaseEnd1, "")
		tl.Mark("client 1", timeline.Expiry, leaseEnd1, fmt.Sprintf("lease expired (TTL %v)", p.cfg.TTL))
		tl.Span("client 1", timeline.Pause, p.pausedAt, p.resumedAt, "SIGSTOP")
	}
	// The heart of the story: client 1 read the order (unpaid) before it
	// stalled, and later acts on that read.
	tl.Mark("client 1", timeline.Note, read1.at, fmt.Sprintf("reads order %d: %s", orderID, read1.State))
	tl.Mark("client 1", timeline.Note, chk1.at, "checks its lease: valid")
	tl.Mark("client 2", writeKind(run.Write2, false), w2.at, writeLabel(run.Write2, run.Token2))
	tl.Mark("client 1", writeKind(run.Write1, true), w1.at, writeLabel(run.Write1, run.Token1))
	tl.Extend(rel1.at)
	tl.SetCaption(runCaption(run))
}

func writeOf(e stamped) Write {
	if e.Kind == evSkipped {
		return Write{}
	}
	return Write{Attempted: true, OK: e.OK, SQLState: e.SQLState, Message: e.Err}
}

func writeKind(w Write, stale bool) timeline.MarkKind {
	switch {
	case !w.Attempted:
		return timeline.Note
	case w.OK && stale:
		return timeline.Stale
	case w.OK:
		return timeline.Accepted
	}
	return timeline.Rejected
}

func writeLabel(w Write, token int64) string {
	switch {
	case !w.Attempted:
		return "saw the order paid; no charge"
	case w.OK:
		return fmt.Sprintf("charge with token %d committed", token)
	}
	return fmt.Sprintf("charge with token %d rejected: %s", token, w.SQLState)
}
