package proxy

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// Proxy is a PostgreSQL wire-protocol proxy in front of a database whose
// tables fencegate protects: it forwards each session's messages unchanged
// and admits only sessions whose role cannot switch enforcement off. Create
// it with New, run it with Start or Serve, stop it with Shutdown or Close.
type Proxy struct {
	cfg      Config
	up       upstream
	log      *slog.Logger
	metrics  *Metrics
	repairer *repairer // nil without Config.AdminUpstream
	checker  *healthChecker
	health   healthState

	mu       sync.Mutex
	ln       net.Listener
	closed   bool
	draining atomic.Bool
	leaving  atomic.Bool // Unready was called
	sessions map[*session]struct{}
	keys     map[uint32][]*session // upstream process ID -> its sessions (see cancel.go)
	wg       sync.WaitGroup        // sessions and the accept loop
	healthWG sync.WaitGroup        // the upstream check loop and the prune loop
	done     chan struct{}         // closed by Close

	soundAt    sync.Map // database -> when a check that found its schema sound began
	admittedAt sync.Map // database NUL role the server authenticated -> when a role check that passed began
	nextID     atomic.Uint64
}

// New checks cfg (see Config.Validate) and returns a Proxy that is not yet
// listening. Settings left zero take their defaults (see DefaultConfig).
func New(cfg Config) (*Proxy, error) {
	up, err := cfg.check()
	if err != nil {
		return nil, err
	}
	cfg.setDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		cfg: cfg, up: up, log: cfg.Logger, metrics: m,
		sessions: map[*session]struct{}{},
		keys:     map[uint32][]*session{},
		done:     make(chan struct{}),
	}
	p.health.err = errHealthUnchecked
	if p.checker, err = newHealthChecker(p); err != nil {
		return nil, err
	}
	if cfg.AdminUpstream != "" {
		if p.repairer, err = newRepairer(cfg.AdminUpstream, cfg.SchemaOwnerRole, cfg.RepairInterval, p.log, m); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Metrics returns the proxy's Prometheus collectors.
func (p *Proxy) Metrics() *Metrics { return p.metrics }

// Start binds the listen address and serves clients in the background
// until Shutdown or Close.
func (p *Proxy) Start() error {
	var reapCfg *pgx.ConnConfig
	if p.cfg.ReapUpstream != "" {
		var err error
		if reapCfg, err = p.reapConfig(); err != nil {
			return err
		}
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", p.cfg.Listen, err)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return ErrClosed
	}
	p.ln = ln
	p.wg.Add(1)
	p.healthWG.Add(1)
	prune := p.cfg.PruneOlderThan > 0 && p.repairer != nil
	if prune {
		p.healthWG.Add(1)
	}
	if reapCfg != nil {
		p.healthWG.Add(1)
	}
	p.mu.Unlock()
	go p.acceptLoop(ln)
	hctx, hcancel := context.WithCancel(context.Background())
	go func() { <-p.done; hcancel() }()
	go func() { defer p.healthWG.Done(); p.checker.loop(hctx, p.cfg.HealthInterval) }()
	if prune {
		go func() { defer p.healthWG.Done(); p.pruneLoop(hctx) }()
	}
	if reapCfg != nil {
		go func() { defer p.healthWG.Done(); p.reapLoop(hctx, reapCfg) }()
	}
	admin := "none"
	if p.repairer != nil {
		admin = p.repairer.describe()
	}
	p.log.Info("proxy listening", "addr", ln.Addr().String(), "upstream", p.up.addr,
		"upstream_sslmode", p.up.sslmode, "client_tls", p.cfg.ClientTLS != nil,
		"allow_privileged_roles", p.cfg.AllowPrivilegedRoles, "admin_upstream", admin,
		"health_upstream", p.checker.describe(), "health_interval", p.cfg.HealthInterval.String(),
		"prune_older_than", p.cfg.PruneOlderThan.String(), "prune_interval", p.cfg.PruneInterval.String())
	if p.up.userInfo {
		p.log.Warn("the user and password in the upstream address are not used: each client authenticates as itself")
	}
	return nil
}

// Serve starts the proxy, blocks until ctx is done, then shuts down,
// giving open sessions one second to finish their transaction. It returns
// ctx.Err() after such a shutdown, or ErrClosed when Close ended it. Use
// Start and Shutdown to choose the drain time.
func (p *Proxy) Serve(ctx context.Context) error {
	if err := p.Start(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-p.done:
		return ErrClosed
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.Shutdown(sctx)
	return ctx.Err()
}

// Upstream returns the upstream server's address (host:port) and TLS mode,
// for display; it holds no credentials.
func (p *Proxy) Upstream() string {
	return p.up.addr + " (sslmode=" + p.up.sslmode + ")"
}

// Addr returns the address the proxy listens on, or "" before Start.
func (p *Proxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return ""
	}
	return p.ln.Addr().String()
}

func (p *Proxy) acceptLoop(ln net.Listener) {
	defer p.wg.Done()
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if p.isClosing() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			p.log.Error("accept failed; proxy stops accepting", "err", err)
			p.health.mu.Lock()
			p.health.acceptErr = fmt.Errorf("not accepting sessions: accept failed: %s", oneLine(err.Error()))
			p.health.mu.Unlock()
			return
		}
		delay = 0
		s := p.newSession(c)
		if s == nil {
			c.Close()
			return
		}
		go s.run()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (p *Proxy) isClosing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed || p.draining.Load()
}

// newSession registers a session for c, or returns nil when closing.
func (p *Proxy) newSession(c net.Conn) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.draining.Load() {
		return nil
	}
	s := newSession(p, c)
	p.sessions[s] = struct{}{}
	p.wg.Add(1)
	return s
}

func (p *Proxy) removeSession(s *session) {
	p.mu.Lock()
	delete(p.sessions, s)
	if s.keySet {
		p.removeKey(s)
	}
	p.mu.Unlock()
	p.wg.Done()
}

// registerKey gives s a fresh random cancel secret, as long as the
// upstream's, and files s under its upstream process ID.
func (p *Proxy) registerKey(s *session) {
	secret := make([]byte, len(s.upSecret))
	_, _ = rand.Read(secret)
	p.mu.Lock()
	defer p.mu.Unlock()
	s.secret, s.keySet = secret, true
	p.keys[s.upPID] = append(p.keys[s.upPID], s)
}

// removeKey drops s from the cancel keys; p.mu is held.
func (p *Proxy) removeKey(s *session) {
	list := slices.DeleteFunc(p.keys[s.upPID], func(o *session) bool { return o == s })
	if len(list) == 0 {
		delete(p.keys, s.upPID)
	} else {
		p.keys[s.upPID] = list
	}
}

// sessionByKey returns the session the client of which was given process
// ID pid and secret, or nil. Secrets are compared in constant time.
func (p *Proxy) sessionByKey(pid uint32, secret []byte) *session {
	p.mu.Lock()
	defer p.mu.Unlock()
	var found *session
	for _, s := range p.keys[pid] {
		if subtle.ConstantTimeCompare(s.secret, secret) == 1 {
			found = s
		}
	}
	return found
}

// stopAccepting closes the listener and returns the sessions open now;
// p.mu is held.
func (p *Proxy) stopAccepting() []*session {
	if p.ln != nil {
		p.ln.Close()
	}
	open := make([]*session, 0, len(p.sessions))
	for s := range p.sessions {
		open = append(open, s)
	}
	return open
}

// Shutdown stops the proxy gracefully, as http.Server.Shutdown does: it
// closes the listener and marks the proxy draining (Ready fails from then
// on), lets each open session finish the transaction it is in (a session
// closes, with FATAL 57P01, when it next becomes idle), then runs Close. If
// ctx ends first it runs Close at once, cutting the sessions still open, and
// returns ctx.Err(); otherwise it returns nil. Once Shutdown has returned
// the proxy is closed: Start and Serve answer ErrClosed. Close stops without
// draining.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.draining.Store(true)
	open := p.stopAccepting()
	p.mu.Unlock()
	for _, s := range open {
		s.drainIfIdle()
	}
	finished := make(chan struct{})
	go func() { p.wg.Wait(); close(finished) }()
	select {
	case <-finished:
		p.Close()
		return nil
	case <-ctx.Done():
		p.Close()
		<-finished
		return ctx.Err()
	}
}

// Close stops the proxy at once, as http.Server.Close does: it closes the
// listener and every session whatever each is doing (PostgreSQL rolls back
// the transaction of a connection that closes), and waits until the
// sessions and the background checks (health, prune, reap) have ended.
// Shutdown runs it last; a second call, or one after Shutdown, does nothing.
// It always returns nil. Shutdown lets open transactions finish first.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	open := p.stopAccepting()
	p.mu.Unlock()
	for _, s := range open {
		s.kill()
	}
	p.wg.Wait()
	p.healthWG.Wait()
	return nil
}
