package lostupdates

import (
	"context"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/worker"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
	"github.com/jackc/pgx/v5"
)

// workerRecord is an event with the worker that reported it.
type workerRecord struct {
	worker.Event
	worker int
}

// pause is one freeze the chaos loop made.
type pause struct {
	worker   int
	from, to time.Time
}

// modeRun is what one mode's run produced before analysis.
type modeRun struct {
	fenced  bool
	start   time.Time
	end     time.Time
	records []workerRecord
	pauses  []pause
	failed  []string        // workers that exited with an error
	final   int64           // counter value read back
	logged  int64           // rows in increments
	traced  int             // rejected attempts that nonetheless left a row
	stale   map[[2]int]bool // (worker, attempt) of committed writes whose token was below an earlier one
}

// Run makes the run in each mode cfg asks for, prints the report to out
// and writes the chart.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	fmt.Fprintf(out, "lost-updates: %d workers, up to %d increments each, TTL %v, %v per mode, freezes of %v every ~%v\n",
		cfg.Workers, cfg.N, cfg.TTL, cfg.Duration, cfg.Pause, cfg.ChaosEvery)
	fmt.Fprintf(out, "seed %d (replay the chaos schedule with -seed %d)\n\n", cfg.Seed, cfg.Seed)
	rep := &Report{cfg: cfg}
	for _, fenced := range cfg.modes() {
		mr, err := runMode(ctx, cfg, fenced)
		if err != nil {
			return nil, err
		}
		rep.modes = append(rep.modes, analyze(cfg, mr))
	}
	path, err := filepath.Abs(cfg.Chart)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if err := rep.writeChart(path); err != nil {
		return nil, err
	}
	rep.chart = path
	rep.print(out)
	return rep, nil
}

// runMode sets up a fresh database, runs the workers and the chaos loop for
// one mode, and reads the counter back.
func runMode(ctx context.Context, cfg Config, fenced bool) (*modeRun, error) {
	resource := "counter:" + pgdb.RandomHex(4)
	db, app, drop, err := createDatabase(ctx, cfg, fenced, resource)
	if err != nil {
		return nil, err
	}
	defer drop()
	// The workers connect as the run's application role: straight to
	// PostgreSQL, or through the proxy.
	dsn := db
	if fenced {
		if dsn, err = proxyDSN(db, cfg.Proxy); err != nil {
			return nil, err
		}
	}
	if dsn, err = withUser(dsn, app.App, app.password); err != nil {
		return nil, err
	}
	mr := &modeRun{fenced: fenced}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}

	g, err := proc.New("", nil)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	ws := &workers{cfg: cfg, mr: mr, g: g, holding: make([]bool, cfg.Workers+1),
		stdins: make([]io.WriteCloser, cfg.Workers), ready: make(chan int, cfg.Workers)}
	for id := 1; id <= cfg.Workers; id++ {
		wc := workerConfig{ID: id, N: cfg.N, Duration: cfg.Duration, DB: dsn, Fenced: fenced, Redis: splitList(cfg.Redis),
			Tokens: splitList(cfg.Tokens), Resource: resource, TTL: cfg.TTL, Prep: cfg.Prep, Work: cfg.Work}
		if err := ws.start(exe, wc); err != nil {
			return nil, err
		}
	}
	// Start every worker at once, when all are connected.
	ws.finished = make(chan struct{})
	go func() { ws.wg.Wait(); close(ws.finished) }()
	if err := ws.awaitReady(ctx); err != nil {
		return nil, err
	}
	mr.start = time.Now()
	deadline := mr.start.Add(cfg.Duration)
	for _, in := range ws.stdins {
		_, _ = io.WriteString(in, "start\n")
	}

	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	go ws.chaos(ctx, fenced, deadline, stopChaos, chaosDone)
	err = ws.awaitFinished(ctx)
	close(stopChaos)
	<-chaosDone
	if err != nil {
		ws.killAll()
		<-ws.finished
		return nil, err
	}
	mr.end = time.Now()
	if len(mr.failed) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(mr.failed, "; "))
	}
	if err := readBack(ctx, db, mr); err != nil {
		return nil, err
	}
	return mr, nil
}

// workers are one mode's worker processes and what they reported.
type workers struct {
	cfg      Config
	mr       *modeRun
	g        *proc.Group
	mu       sync.Mutex
	holding  []bool // by worker id: holds the lock, as its records last said
	procs    []*proc.Proc
	stdins   []io.WriteCloser
	ready    chan int
	wg       sync.WaitGroup
	finished chan struct{} // closed once every worker exited
}

// start starts worker wc.ID.
func (ws *workers) start(exe string, wc workerConfig) error {
	id := wc.ID
	env, err := worker.Env(wc)
	if err != nil {
		return err
	}
	ws.wg.Add(1)
	// The worker is this program again.
	p, err := ws.g.Start(fmt.Sprintf("worker %d", id), exe, worker.Args(worker.LostUpdates),
		proc.WithEnv(env),
		proc.WithSetup(func(cmd *exec.Cmd) (err error) {
			ws.stdins[id-1], err = cmd.StdinPipe()
			return err
		}),
		proc.WithStdoutLines(func(line []byte) { ws.line(id, line) }),
		proc.OnExit(func(p *proc.Proc, err error) {
			defer ws.wg.Done()
			if err != nil {
				ws.mu.Lock()
				ws.mr.failed = append(ws.mr.failed, fmt.Sprintf("worker %d: %v: %s", id, err, strings.TrimSpace(p.LogTail(50))))
				ws.mu.Unlock()
			}
		}))
	if err != nil {
		ws.wg.Done()
		_ = ws.g.Close()
		ws.wg.Wait()
		return fmt.Errorf("start worker %d: %w", id, err)
	}
	ws.procs = append(ws.procs, p)
	return nil
}

// line takes one line of worker id's output.
func (ws *workers) line(id int, line []byte) {
	r, ok := worker.Decode(line)
	if !ok {
		return
	}
	if r.Kind == "ready" {
		ws.ready <- id
		return
	}
	ws.mu.Lock()
	ws.mr.records = append(ws.mr.records, workerRecord{r, id})
	switch r.Kind {
	case "acq":
		ws.holding[id] = true
	case "rel":
		ws.holding[id] = false
	}
	ws.mu.Unlock()
}

func (ws *workers) killAll() {
	for _, p := range ws.procs {
		_ = p.Kill()
	}
}

// awaitReady waits until every worker is connected and ready to start.
func (ws *workers) awaitReady(ctx context.Context) error {
	for n := 0; n < ws.cfg.Workers; n++ {
		select {
		case <-ws.ready:
		case <-ws.finished:
			return fmt.Errorf("workers exited before starting: %s", strings.Join(ws.mr.failed, "; "))
		case <-ctx.Done():
			ws.killAll()
			<-ws.finished
			return ctx.Err()
		case <-time.After(60 * time.Second):
			ws.killAll()
			<-ws.finished
			return fmt.Errorf("workers not ready within 60s")
		}
	}
	return nil
}

// awaitFinished waits until every worker exited; on an error, they may
// still run.
func (ws *workers) awaitFinished(ctx context.Context) error {
	select {
	case <-ws.finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(ws.cfg.Duration + 30*time.Second):
		return fmt.Errorf("workers did not finish within %v of the deadline", 30*time.Second)
	}
}

// chaos is the chaos loop: it freezes a worker that holds the lock (any
// worker when none does within 100ms) for cfg.Pause, then lets it go, until
// stop closes or no pause fits before deadline; it closes done.
func (ws *workers) chaos(ctx context.Context, fenced bool, deadline time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	cfg := ws.cfg
	salt := uint64(0)
	if fenced {
		salt = 1
	}
	rng := mrand.New(mrand.NewPCG(uint64(cfg.Seed), salt))
	for {
		wait := time.Duration(float64(cfg.ChaosEvery) * (0.5 + rng.Float64()))
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if time.Now().Add(cfg.Pause).After(deadline) {
			return
		}
		victim := ws.victim(rng)
		p := ws.procs[victim-1]
		from := time.Now()
		if p.Signal(syscall.SIGSTOP) != nil {
			continue
		}
		select {
		case <-time.After(cfg.Pause):
		case <-ctx.Done():
		}
		_ = p.Signal(syscall.SIGCONT)
		ws.mu.Lock()
		ws.mr.pauses = append(ws.mr.pauses, pause{worker: victim, from: from, to: time.Now()})
		ws.mu.Unlock()
	}
}

// victim picks the worker to freeze: a holder, waiting up to 100ms for
// one to show up, else any worker.
func (ws *workers) victim(rng *mrand.Rand) int {
	var holders []int
	for tries := 0; tries < 100 && len(holders) == 0; tries++ {
		ws.mu.Lock()
		for id := 1; id <= ws.cfg.Workers; id++ {
			if ws.holding[id] {
				holders = append(holders, id)
			}
		}
		ws.mu.Unlock()
		if len(holders) == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	victim := 1 + rng.IntN(ws.cfg.Workers)
	if len(holders) > 0 {
		victim = holders[rng.IntN(len(holders))]
	}
	return victim
}

// readBack reads the final counter, the increments log and checks that no
// rejected attempt left a row.
func readBack(ctx context.Context, db string, mr *modeRun) error {
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return fmt.Errorf("connect %s: %w", db, err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT v FROM counter WHERE id = 1").Scan(&mr.final); err != nil {
		return fmt.Errorf("read counter: %w", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM increments").Scan(&mr.logged); err != nil {
		return fmt.Errorf("count increments: %w", err)
	}
	// A stale write is one that committed with a token lower than a write
	// committed before it. Row ids follow insertion order, which through the
	// proxy is commit order, as the fence serializes the transactions.
	rows, err := conn.Query(ctx, `SELECT worker, attempt FROM (
		SELECT worker, attempt, token, max(token) OVER (ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev
		FROM increments) s WHERE token < prev`)
	if err != nil {
		return fmt.Errorf("find stale writes: %w", err)
	}
	mr.stale = map[[2]int]bool{}
	for rows.Next() {
		var w, a int
		if err := rows.Scan(&w, &a); err != nil {
			return err
		}
		mr.stale[[2]int{w, a}] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find stale writes: %w", err)
	}
	for _, r := range mr.records {
		if r.Kind != "write" || r.OK {
			continue
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM increments WHERE worker = $1 AND attempt = $2", r.worker, r.Attempt).Scan(&n); err != nil {
			return err
		}
		mr.traced += n
	}
	return nil
}

// appRole is the application role of a run's database.
type appRole struct {
	*fenceddb.DB
	password string
}

// createDatabase makes a fresh database with the counter and the
// increments log, and an application role that may read and write them,
// and returns the database's DSN (the administrator's), the role, and a
// function that drops both (unless -keep). For a fenced run it installs
// schema fencegate and protects both tables as one resource, the one the
// workers lock: PostgreSQL then refuses every write to them that is not
// fenced with it. For the direct run the tables stay unprotected.
func createDatabase(ctx context.Context, cfg Config, fenced bool, resource string) (string, *appRole, func(), error) {
	name := pgdb.RandomName("lost_updates_")
	dsn, err := pgdb.Create(ctx, cfg.Postgres, name)
	if err != nil {
		return "", nil, nil, fmt.Errorf("PostgreSQL (--postgres %s): %w; is fencegate dev running?", cfg.Postgres, err)
	}
	app := &appRole{password: pgdb.RandomHex(16)}
	role := pgdb.RandomName("fg_lost_updates_")
	drop := func() {
		if cfg.Keep {
			return
		}
		_ = pgdb.Drop(context.Background(), cfg.Postgres, name)
		_ = pgdb.DropRoles(context.Background(), cfg.Postgres, nil, role)
	}
	expr := "" // unprotected
	if fenced {
		expr = "'" + resource + "'"
	}
	if err := setupDatabase(ctx, dsn, cfg.Owner, role, expr, app); err != nil {
		drop()
		return "", nil, nil, err
	}
	return dsn, app, drop, nil
}

// setupDatabase creates role and the tables in the database of dsn, as
// an administrator does once, and protects the tables with expr (none:
// unprotected).
func setupDatabase(ctx context.Context, dsn, owner, role, expr string, app *appRole) error {
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect as the administrator: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	if app.DB, err = fenceddb.Setup(ctx, admin, fenceddb.Options{Owner: owner, App: role, AppPassword: app.password}); err != nil {
		return fmt.Errorf("set up roles and schema fencegate: %w (the --postgres DSN must be an administrator's)", err)
	}
	for _, t := range []struct{ name, create string }{
		{"counter", "CREATE TABLE counter (id int PRIMARY KEY, v bigint NOT NULL); INSERT INTO counter VALUES (1, 0)"},
		{"increments", `CREATE TABLE increments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  worker int NOT NULL, attempt int NOT NULL, token bigint NOT NULL, value bigint NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp())`},
	} {
		if _, err := admin.Exec(ctx, t.create); err != nil {
			return fmt.Errorf("create table %s: %w", t.name, err)
		}
		if err := app.Protect(ctx, admin, fenceddb.Table{Name: t.name, Resource: expr}); err != nil {
			return fmt.Errorf("protect table %s: %w", t.name, err)
		}
	}
	return nil
}

// withUser returns dsn with user and password as its credentials.
func withUser(dsn, user, password string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.User = url.UserPassword(user, password)
	return u.String(), nil
}

// proxyDSN points a direct DSN at the proxy: same user, password, database.
func proxyDSN(direct, proxy string) (string, error) {
	u, err := url.Parse(direct)
	if err != nil {
		return "", err
	}
	u.Host = proxy
	return u.String(), nil
}
