package lostupdates

import (
	"context"
	"encoding/json"
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

	"github.com/fencegate/fencegate/internal/demo/appdb"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/jackc/pgx/v5"
)

// workerRecord is a record with the worker that reported it.
type workerRecord struct {
	record
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
	if dsn, err = app.DSN(dsn); err != nil {
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
	var (
		mu      sync.Mutex
		holding = make([]bool, cfg.Workers+1)
		procs   []*proc.Proc
		stdins  = make([]io.WriteCloser, cfg.Workers)
		ready   = make(chan int, cfg.Workers)
		wg      sync.WaitGroup
	)
	for id := 1; id <= cfg.Workers; id++ {
		wc := workerConfig{ID: id, N: cfg.N, Duration: cfg.Duration, DB: dsn, Fenced: fenced, Redis: splitList(cfg.Redis),
			Tokens: splitList(cfg.Tokens), Resource: resource, TTL: cfg.TTL, Prep: cfg.Prep, Work: cfg.Work}
		raw, _ := json.Marshal(wc)
		wg.Add(1)
		// The worker is this program again, told so by its environment;
		// the arguments are those of the fencegate subcommand.
		p, err := g.Start(fmt.Sprintf("worker %d", id), exe, []string{"demo", "lost-updates"},
			proc.WithEnv(workerEnv+"="+string(raw)),
			proc.WithSetup(func(cmd *exec.Cmd) (err error) {
				stdins[id-1], err = cmd.StdinPipe()
				return err
			}),
			proc.WithStdoutLines(func(line []byte) {
				var r record
				if json.Unmarshal(line, &r) != nil {
					return
				}
				if r.Ev == "ready" {
					ready <- id
					return
				}
				mu.Lock()
				mr.records = append(mr.records, workerRecord{r, id})
				switch r.Ev {
				case "acq":
					holding[id] = true
				case "rel":
					holding[id] = false
				}
				mu.Unlock()
			}),
			proc.OnExit(func(p *proc.Proc, err error) {
				defer wg.Done()
				if err != nil {
					mu.Lock()
					mr.failed = append(mr.failed, fmt.Sprintf("worker %d: %v: %s", id, err, strings.TrimSpace(p.LogTail(50))))
					mu.Unlock()
				}
			}))
		if err != nil {
			wg.Done()
			_ = g.Close()
			wg.Wait()
			return nil, fmt.Errorf("start worker %d: %w", id, err)
		}
		procs = append(procs, p)
	}
	killAll := func() {
		for _, p := range procs {
			_ = p.Kill()
		}
	}
	// Start every worker at once, when all are connected.
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	for n := 0; n < cfg.Workers; n++ {
		select {
		case <-ready:
		case <-finished:
			return nil, fmt.Errorf("workers exited before starting: %s", strings.Join(mr.failed, "; "))
		case <-ctx.Done():
			killAll()
			<-finished
			return nil, ctx.Err()
		case <-time.After(60 * time.Second):
			killAll()
			<-finished
			return nil, fmt.Errorf("workers not ready within 60s")
		}
	}
	mr.start = time.Now()
	deadline := mr.start.Add(cfg.Duration)
	for _, in := range stdins {
		_, _ = io.WriteString(in, "start\n")
	}

	// The chaos loop: freeze a worker that holds the lock (any worker when
	// none does within 100ms) for cfg.Pause, then let it go.
	chaosDone := make(chan struct{})
	stopChaos := make(chan struct{})
	go func() {
		defer close(chaosDone)
		salt := uint64(0)
		if fenced {
			salt = 1
		}
		rng := mrand.New(mrand.NewPCG(uint64(cfg.Seed), salt))
		for {
			wait := time.Duration(float64(cfg.ChaosEvery) * (0.5 + rng.Float64()))
			select {
			case <-stopChaos:
				return
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			if time.Now().Add(cfg.Pause).After(deadline) {
				return
			}
			// Aim at a holder: wait up to 100ms for one to show up.
			var holders []int
			for tries := 0; tries < 100 && len(holders) == 0; tries++ {
				mu.Lock()
				for id := 1; id <= cfg.Workers; id++ {
					if holding[id] {
						holders = append(holders, id)
					}
				}
				mu.Unlock()
				if len(holders) == 0 {
					time.Sleep(time.Millisecond)
				}
			}
			victim := 1 + rng.IntN(cfg.Workers)
			if len(holders) > 0 {
				victim = holders[rng.IntN(len(holders))]
			}
			p := procs[victim-1]
			from := time.Now()
			if p.Signal(syscall.SIGSTOP) != nil {
				continue
			}
			select {
			case <-time.After(cfg.Pause):
			case <-ctx.Done():
			}
			_ = p.Signal(syscall.SIGCONT)
			mu.Lock()
			mr.pauses = append(mr.pauses, pause{worker: victim, from: from, to: time.Now()})
			mu.Unlock()
		}
	}()

	select {
	case <-finished:
	case <-ctx.Done():
		close(stopChaos)
		<-chaosDone
		killAll()
		<-finished
		return nil, ctx.Err()
	case <-time.After(cfg.Duration + 30*time.Second):
		close(stopChaos)
		<-chaosDone
		killAll()
		<-finished
		return nil, fmt.Errorf("workers did not finish within %v of the deadline", 30*time.Second)
	}
	close(stopChaos)
	<-chaosDone
	mr.end = time.Now()
	if len(mr.failed) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(mr.failed, "; "))
	}
	if err := readBack(ctx, db, mr); err != nil {
		return nil, err
	}
	return mr, nil
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
		if r.Ev != "write" || r.OK {
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

// createDatabase makes a fresh database with the counter and the
// increments log, and an application role that may read and write them,
// and returns the database's DSN (the administrator's), the role, and a
// function that drops both (unless -keep). For a fenced run it installs
// schema fencegate and protects both tables as one resource, the one the
// workers lock: PostgreSQL then refuses every write to them that is not
// fenced with it. For the direct run the tables stay unprotected.
func createDatabase(ctx context.Context, cfg Config, fenced bool, resource string) (string, *appdb.App, func(), error) {
	name := pgdb.RandomName("lost_updates_")
	dsn, err := pgdb.Create(ctx, cfg.Postgres, name)
	if err != nil {
		return "", nil, nil, fmt.Errorf("PostgreSQL (--postgres %s): %w; is fencegate dev running?", cfg.Postgres, err)
	}
	var app *appdb.App
	drop := func() {
		if cfg.Keep {
			return
		}
		if app != nil {
			_ = app.Close()
		}
		_ = pgdb.Drop(context.Background(), cfg.Postgres, name)
	}
	expr := "" // unprotected
	if fenced {
		expr = "'" + resource + "'"
	}
	app, err = appdb.Setup(ctx, dsn, []appdb.Table{
		{Name: "counter", Create: "CREATE TABLE counter (id int PRIMARY KEY, v bigint NOT NULL); INSERT INTO counter VALUES (1, 0)", Resource: expr},
		{Name: "increments", Create: `CREATE TABLE increments (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  worker int NOT NULL, attempt int NOT NULL, token bigint NOT NULL, value bigint NOT NULL,
  at timestamptz NOT NULL DEFAULT clock_timestamp())`, Resource: expr},
	}, appdb.Options{OwnerRole: cfg.Owner, RolePrefix: "fg_lost_updates_"})
	if err != nil {
		drop()
		return "", nil, nil, err
	}
	return dsn, app, drop, nil
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
