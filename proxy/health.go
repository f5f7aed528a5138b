package proxy

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgpassfile"
	"github.com/jackc/pgx/v5"
)

// DefaultHealthInterval is the default Config.HealthInterval.
const DefaultHealthInterval = 5 * time.Second

// Two checks, named as the token service names its own:
//
//   - Ready (/readyz), for load balancers and readiness probes: would a new
//     session through this proxy work now? Not while the proxy does not
//     accept (not started, draining, closed, its accept loop stopped), nor
//     when the upstream does not answer, nor, when the proxy has a role
//     and database to look with (Config.HealthUpstream), when that login
//     fails or that database's fencegate schema is not sound (the gate
//     would refuse each of its sessions with FG005).
//   - Live (/healthz), for liveness probes: is the process serving? Yes
//     until it closed, draining included and whatever the upstream does,
//     so that a probe never restarts a proxy that is finishing its
//     sessions, nor every proxy at once when PostgreSQL is down.
//
// The upstream is checked in the background every Config.HealthInterval,
// never on a probe's request: a probe that hammers /readyz costs
// PostgreSQL nothing, and the answer is the last check's.

var (
	errHealthNotStarted = errors.New("not accepting sessions: the proxy has not started")
	errHealthClosed     = errors.New("not accepting sessions: the proxy is closed")
	errHealthDraining   = errors.New("draining: the proxy is shutting down and accepts no new sessions")
	errHealthLeaving    = errors.New("draining soon: the proxy is about to shut down; it still accepts sessions so that load balancers can turn away first")
	errHealthUnchecked  = errors.New("the upstream has not been checked yet")
)

// healthState is the outcome of the last upstream check.
type healthState struct {
	mu        sync.Mutex
	err       error // nil when the last check passed; errHealthUnchecked before the first
	acceptErr error // set when the accept loop stopped on an error
}

func (h *healthState) set(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

// Ready reports whether a new session through the proxy would work now:
// nil when the proxy accepts sessions and its last upstream check passed,
// else an error whose message is one line saying why (draining, upstream
// unreachable, schema not sound, ...). It never blocks on the network: the
// upstream is checked in the background every Config.HealthInterval.
func (p *Proxy) Ready() error {
	p.mu.Lock()
	started, closed := p.ln != nil, p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return errHealthClosed
	case p.draining.Load():
		return errHealthDraining
	case p.leaving.Load():
		return errHealthLeaving
	case !started:
		return errHealthNotStarted
	}
	p.health.mu.Lock()
	defer p.health.mu.Unlock()
	if p.health.acceptErr != nil {
		return p.health.acceptErr
	}
	return p.health.err
}

// Unready makes Ready fail from now on while the proxy still accepts and
// serves sessions: call it when shutdown is coming, wait until load
// balancers have seen /readyz fail, then call Shutdown. Clients that
// connect in between are served as usual.
func (p *Proxy) Unready() { p.leaving.Store(true) }

// Live reports whether the proxy process is still serving: nil until Close
// (or the end of Shutdown), draining included, whatever the upstream does.
func (p *Proxy) Live() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errHealthClosed
	}
	return nil
}

// ReadyHandler serves Ready over HTTP for load balancers: 200 and "ok",
// or 503 and the one-line reason. The fencegate command mounts it at
// /readyz.
func (p *Proxy) ReadyHandler() http.Handler { return statusHandler(p.Ready) }

// LiveHandler serves Live over HTTP: 200 and "ok" while the proxy runs,
// draining included, 503 once it closed. The fencegate command mounts it at
// /healthz, for a liveness probe that must not restart a proxy because its
// upstream is down or because it is draining.
func (p *Proxy) LiveHandler() http.Handler { return statusHandler(p.Live) }

func statusHandler(check func() error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
}

// healthChecker checks the upstream: with Config.HealthUpstream by logging
// in and running the schema's health query, else by asking the server to
// negotiate TLS (any PostgreSQL answers that before authentication, and
// logs nothing when the client then goes away).
type healthChecker struct {
	p   *Proxy
	cfg *pgx.ConnConfig // nil without Config.HealthUpstream
}

func newHealthChecker(p *Proxy) (*healthChecker, error) {
	h := &healthChecker{p: p}
	if p.cfg.HealthUpstream == "" {
		return h, nil
	}
	cfg, err := pgx.ParseConfig(p.cfg.HealthUpstream)
	if err != nil {
		// The parse error may quote the string, password and all.
		return nil, fmt.Errorf("%w: the health connection string does not parse (want postgres://user:password@/database or user=... dbname=... key=value pairs)", ErrBadUpstream)
	}
	p.viaUpstream(cfg)
	h.cfg = cfg
	return h, nil
}

// viaUpstream points cfg, a connection of the proxy's own (the health
// check, the reaper), at the upstream the sessions use: its address, a
// password from the password file for it when cfg has none, the proxy's
// dial with the upstream's TLS mode, and the simple protocol (no prepared
// statements: the upstream may be a pooler in transaction mode).
func (p *Proxy) viaUpstream(cfg *pgx.ConnConfig) {
	host, port, _ := net.SplitHostPort(p.up.addr)
	cfg.Host = host
	if n, err := strconv.Atoi(port); err == nil {
		cfg.Port = uint16(n)
	}
	if cfg.Password == "" {
		// pgx looked in the password file for the host the string named
		// (or its default); the connection goes to the upstream's.
		cfg.Password = passfilePassword(host, port, cfg.Database, cfg.User)
	}
	cfg.TLSConfig = nil
	cfg.Fallbacks = nil
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) { return p.dialUpstream(ctx) }
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
}

// runHealthQuery runs the schema's health query on conn in a read-only
// transaction under pgfence's pinned settings, so that what the session's
// role or database chose cannot change what the query prints, and returns
// the problems it found.
func runHealthQuery(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var problems []string
	err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, pgfence.PinSQL(true)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, pgfence.HealthQuery)
		if err != nil {
			return err
		}
		problems, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	return problems, err
}

// passfilePassword looks up a password in $PGPASSFILE, else ~/.pgpass,
// as libpq does; "" when there is none.
func passfilePassword(host, port, database, user string) string {
	path := os.Getenv("PGPASSFILE")
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, ".pgpass")
	}
	pf, err := pgpassfile.ReadPassfile(path)
	if err != nil {
		return ""
	}
	return pf.FindPassword(host, port, database, user)
}

// describe names what the check logs in as, for logs: no password.
func (h *healthChecker) describe() string {
	if h.cfg == nil {
		return "none"
	}
	return fmt.Sprintf("user=%s database=%s", h.cfg.User, h.cfg.Database)
}

// loop checks the upstream at once and then every interval until the
// proxy closes.
func (h *healthChecker) loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var (
		failing bool
		reason  string
		logged  time.Time
	)
	for {
		cctx, cancel := context.WithTimeout(ctx, max(every, h.p.cfg.DialTimeout))
		err := h.check(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		h.p.health.set(err)
		if err != nil {
			h.p.metrics.UpstreamHealthy.Set(0)
		} else {
			h.p.metrics.UpstreamHealthy.Set(1)
		}
		// Log when the verdict changes, and a failure's reason when it
		// changed, at most once a minute (reasons of dial errors carry
		// ephemeral ports).
		switch {
		case err == nil && failing:
			h.p.log.Info("upstream check passed again; the proxy is ready")
			failing = false
		case err != nil && (!failing || err.Error() != reason && time.Since(logged) >= time.Minute):
			h.p.log.Warn("upstream check failed; the proxy is not ready", "reason", err.Error())
			failing, reason, logged = true, err.Error(), time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// check runs one upstream check and returns why it failed, in one line.
func (h *healthChecker) check(ctx context.Context) error {
	if h.cfg == nil {
		return h.probe(ctx)
	}
	conn, err := pgx.ConnectConfig(ctx, h.cfg)
	if err != nil {
		return fmt.Errorf("upstream %s: cannot log in as the health role (%s): %s", h.p.up.addr, h.describe(), oneLine(err.Error()))
	}
	defer conn.Close(context.Background())
	problems, err := runHealthQuery(ctx, conn)
	if err != nil {
		return fmt.Errorf("upstream %s: the schema check failed as the health role (%s): %s", h.p.up.addr, h.describe(), oneLine(err.Error()))
	}
	if len(problems) > 0 {
		more := ""
		if len(problems) > 1 {
			more = fmt.Sprintf(" (and %d more problems)", len(problems)-1)
		}
		return fmt.Errorf("the fencegate schema of database %q is not sound, so the gate refuses its sessions: %s%s",
			h.cfg.Database, oneLine(problems[0]), more)
	}
	return nil
}

// probe asks the upstream to negotiate TLS, as every client may before it
// authenticates: a PostgreSQL server answers S or N. On S it completes the
// handshake (verifying the certificate as the upstream's sslmode says) so
// that the server sees a client that simply went away, which it does not
// log.
func (h *healthChecker) probe(ctx context.Context) error {
	p := h.p
	if p.up.sslmode != "disable" {
		c, err := p.dialUpstream(ctx)
		if err != nil {
			return fmt.Errorf("upstream %s: %s", p.up.addr, oneLine(err.Error()))
		}
		c.Close()
		return nil
	}
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", p.up.addr)
	if err != nil {
		return fmt.Errorf("upstream %s: %s", p.up.addr, oneLine(err.Error()))
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var req [8]byte
	binary.BigEndian.PutUint32(req[:4], 8)
	binary.BigEndian.PutUint32(req[4:], codeSSL)
	var ans [1]byte
	if _, err = c.Write(req[:]); err == nil {
		_, err = io.ReadFull(c, ans[:])
	}
	if err != nil {
		return fmt.Errorf("upstream %s does not answer as PostgreSQL: %s", p.up.addr, oneLine(err.Error()))
	}
	switch ans[0] {
	case 'N':
		return nil
	case 'S':
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true}) // sslmode=disable: only to hang up quietly
		_ = tc.HandshakeContext(ctx)
		tc.Close()
		return nil
	}
	return fmt.Errorf("upstream %s does not answer as PostgreSQL (it answered an SSLRequest with %q)", p.up.addr, ans[0])
}

// oneLine joins the lines of s with "; ".
func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	f := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	return strings.Join(f, "; ")
}
