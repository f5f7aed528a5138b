package faults

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/payprovider"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/poll"
	"github.com/fencegate/fencegate/internal/proc"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// schemaSQL is the workload's data: one counter and one row per committed
// increment, written in the same fenced transaction. Both tables are
// protected, every row belonging to resource Resource.
const schemaSQL = `
CREATE TABLE counter (id int PRIMARY KEY, value bigint NOT NULL);
INSERT INTO counter VALUES (1, 0);
CREATE TABLE increments (
	client text NOT NULL, op bigint NOT NULL, token bigint NOT NULL, prev bigint NOT NULL,
	PRIMARY KEY (client, op));`

// Resource is the resource the workload locks and fences, and the one every
// row of its tables belongs to.
const Resource = "counter"

// resourceExpr is the tables' resource expression: a constant, so that each
// table is one resource.
const resourceExpr = "'" + Resource + "'"

// StackConfig describes the processes of one run.
type StackConfig struct {
	Binary     string // the fencegate executable
	Dir        string // the run's directory: data dirs, logs, clock files
	PostgreSQL string // admin DSN of the PostgreSQL server
	Redis      int    // number of Redis masters: 1, or 5 for Redlock
	ClockShim  string // path of the clock shim, or "" to run Redis without it
	SlowDisk   bool   // prepare the disk throttle for the slow-disk fault
	Logger     *slog.Logger
}

// TokenNode is one token service node and the relays its Raft traffic to
// each peer goes through.
type TokenNode struct {
	ID       string
	RaftAddr string
	APIAddr  string
	DataDir  string
	Proc     *proc.Proc
	// Out maps a peer's ID to the relay this node dials that peer through.
	Out map[string]*netfault.Relay
}

// RedisNode is one Redis master, under the clock shim when Clock is set.
type RedisNode struct {
	Name  string
	Addr  string
	Proc  *proc.Proc
	Clock *Clock
	skew  time.Duration
}

// ProxyNode is one fencing proxy.
type ProxyNode struct {
	Name string
	Addr string
	Proc *proc.Proc
}

// Stack is the whole system of one run, as real processes on loopback.
type Stack struct {
	cfg     StackConfig
	log     *slog.Logger
	Sup     *proc.Group
	Tokens  []*TokenNode
	Redis   []*RedisNode
	Proxies []*ProxyNode
	DBName  string
	// DB is the run's database: schema fencegate, its owner role and the
	// application role the clients log in as (both the run's own).
	DB *devstack.FencedDB
	// Disk throttles a token node's writes; nil when the machine cannot.
	Disk   *DiskThrottle
	relays []*netfault.Relay
	// Provider receives the effects the clients record (a payment
	// provider that charges once per Idempotency-Key and now and then
	// answers 503 or charges and resets the connection); Relay is the
	// "fencegate relay" process that delivers them.
	Provider *payprovider.Provider
	Relay    *proc.Proc
}

// EffectTarget is the relay's name for the provider.
const EffectTarget = "provider"

func (s *Stack) startRelay() error {
	s.Provider = payprovider.Start(payprovider.Faults{Unavailable: 0.05, CloseAfterCharge: 0.05})
	s.Relay = s.Sup.Add("relay", s.cfg.Binary, []string{"relay", "--target", EffectTarget + "=" + s.Provider.URL(),
		"--timeout", "2s", "--poll", "100ms", "--min-backoff", "20ms", "--max-backoff", "500ms"},
		proc.WithEnv("DATABASE_URL="+s.DB.AdminDSN))
	return s.Relay.Start()
}

// waitEffects waits, up to timeout, until no effect is pending: the relay
// delivers what the run committed.
func (s *Stack) waitEffects(ctx context.Context, c *pgx.Conn, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var pending int
		if err := c.QueryRow(ctx, "SELECT count(*) FROM fencegate.effects WHERE state = 'pending'").Scan(&pending); err != nil || pending == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// StartStack starts every process of a run and waits until each serves:
// a fresh database, Redis masters, three token nodes with a leader, two
// proxies. On error it stops whatever it started. Every server listens on
// a port from package freeport: the nemesis kills and restarts it on that
// port, and no outgoing connection may take the port meanwhile.
func StartStack(ctx context.Context, cfg StackConfig) (_ *Stack, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Redis <= 0 {
		cfg.Redis = 1
	}
	sup, err := proc.New(filepath.Join(cfg.Dir, "logs"), cfg.Logger)
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, log: cfg.Logger.With("component", "stack"), Sup: sup}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.createDB(ctx); err != nil {
		return nil, err
	}
	if err := s.startRedis(ctx); err != nil {
		return nil, err
	}
	if cfg.SlowDisk {
		if s.Disk, err = NewDiskThrottle(filepath.Join(cfg.Dir, "data")); err != nil {
			return nil, err
		}
	}
	if err := s.startTokens(ctx); err != nil {
		return nil, err
	}
	if err := s.startProxies(ctx); err != nil {
		return nil, err
	}
	if err := s.startRelay(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Stack) createDB(ctx context.Context) (err error) {
	s.DBName = pgdb.RandomName("fg_faults_")
	if s.DB, err = devstack.CreateFenced(ctx, s.cfg.PostgreSQL, s.DBName); err != nil {
		return fmt.Errorf("PostgreSQL %s: %w", s.cfg.PostgreSQL, err)
	}
	s.log.Info("created database", "db", s.DBName)
	c, err := pgx.Connect(ctx, s.DB.AdminDSN)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", s.DBName, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("create workload schema: %w", err)
	}
	for _, t := range []string{"counter", "increments"} {
		if err := s.DB.Protect(ctx, c, devstack.Protected(t, resourceExpr)); err != nil {
			return fmt.Errorf("protect %s: %w", t, err)
		}
	}
	return nil
}

// DirectDSN is the DSN of the run's database on PostgreSQL itself, not
// through a proxy: the checkers read the final state with it.
func (s *Stack) DirectDSN() string { return s.DB.AdminDSN }

// ProxyDSNs are the run's database through each proxy, as the application
// role, without its password (ClientEnv has it).
func (s *Stack) ProxyDSNs() []string {
	var out []string
	for _, p := range s.Proxies {
		out = append(out, s.DB.AppDSN(p.Addr))
	}
	return out
}

// ClientEnv is the environment a process needs to log in as the
// application role: its password, which never goes on a command line.
func (s *Stack) ClientEnv() []string {
	if s.DB == nil || s.DB.AppPassword == "" {
		return nil
	}
	return []string{"PGPASSWORD=" + s.DB.AppPassword}
}

// RedisAddrs are the Redis masters' addresses.
func (s *Stack) RedisAddrs() []string {
	var out []string
	for _, r := range s.Redis {
		out = append(out, r.Addr)
	}
	return out
}

// TokenURLs are the token nodes' API URLs.
func (s *Stack) TokenURLs() []string {
	var out []string
	for _, n := range s.Tokens {
		out = append(out, "http://"+n.APIAddr)
	}
	return out
}

func (s *Stack) startRedis(ctx context.Context) error {
	addrs, err := freeport.Loopback(s.cfg.Redis)
	if err != nil {
		return err
	}
	for i, addr := range addrs {
		r := &RedisNode{Name: fmt.Sprintf("redis%d", i+1), Addr: addr}
		var opts []proc.Option
		if s.cfg.ClockShim != "" {
			r.Clock, err = NewClock(s.cfg.ClockShim, filepath.Join(s.cfg.Dir, r.Name+".clock"))
			if err != nil {
				return err
			}
			opts = append(opts, proc.WithEnv(r.Clock.Env()...))
		}
		r.Proc = s.Sup.Add(r.Name, "redis-server", servers.RedisArgs(addr), opts...)
		if err := r.Proc.Start(); err != nil {
			return err
		}
		s.Redis = append(s.Redis, r)
	}
	for _, r := range s.Redis {
		if err := r.WaitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// WaitReady waits until the Redis master answers PING.
func (r *RedisNode) WaitReady(ctx context.Context) error {
	return r.Proc.WaitReady(ctx, 20*time.Millisecond, 15*time.Second, func(ctx context.Context) error {
		return servers.PingRedis(ctx, &redis.Options{Addr: r.Addr})
	})
}

func (s *Stack) startTokens(ctx context.Context) error {
	const n = 3
	addrs, err := freeport.Loopback(2 * n)
	if err != nil {
		return err
	}
	for i := range n {
		raft, api := addrs[2*i], addrs[2*i+1]
		s.Tokens = append(s.Tokens, &TokenNode{ID: fmt.Sprintf("n%d", i+1), RaftAddr: raft, APIAddr: api, Out: map[string]*netfault.Relay{}})
	}
	var peers []string
	for _, t := range s.Tokens {
		peers = append(peers, t.ID+"="+t.RaftAddr+"="+t.APIAddr)
	}
	for _, t := range s.Tokens {
		var via []string
		for _, p := range s.Tokens {
			if p == t {
				continue
			}
			r, err := netfault.NewRelay("127.0.0.1:0", p.RaftAddr)
			if err != nil {
				return fmt.Errorf("start relay %s->%s: %w", t.ID, p.ID, err)
			}
			s.relays = append(s.relays, r)
			t.Out[p.ID] = r
			via = append(via, p.RaftAddr+"="+r.Addr())
		}
		t.DataDir = filepath.Join(s.cfg.Dir, "data", t.ID)
		args := []string{"token", "serve", "--id", t.ID,
			"--data-dir", t.DataDir,
			"--raft-addr", t.RaftAddr, "--api-addr", t.APIAddr,
			"--peers", strings.Join(peers, ","),
			"--dial-via", strings.Join(via, ",")}
		t.Proc = s.Sup.Add("token-"+t.ID, s.cfg.Binary, args)
		if err := t.Proc.Start(); err != nil {
			return err
		}
	}
	if err := s.waitTokensUp(ctx, 30*time.Second); err != nil {
		return err
	}
	_, err = s.WaitLeader(ctx, 30*time.Second)
	return err
}

// waitTokensUp waits until every token node answers on its API. A stack
// that starts with a node missing would test less than it claims (two
// nodes elect a leader, but no partition leaves them a majority), so a node
// that exits instead fails the start at once, with the end of its log.
func (s *Stack) waitTokensUp(ctx context.Context, timeout time.Duration) error {
	for _, t := range s.Tokens {
		if err := t.Proc.WaitReady(ctx, 20*time.Millisecond, timeout, func(ctx context.Context) error {
			_, err := s.status(ctx, t)
			return err
		}); err != nil {
			return fmt.Errorf("token node %s: %w", t.ID, err)
		}
	}
	return nil
}

// status is what node t says of the cluster, within a second.
func (s *Stack) status(ctx context.Context, t *TokenNode) (tokenapi.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, err := tokenclient.NewClient([]string{t.APIAddr}, tokenclient.WithFollowLeader(false))
	if err != nil {
		return tokenapi.Status{}, err
	}
	defer c.Close()
	return c.Status(ctx)
}

// Leader returns the node that says it is the leader, with the highest term
// when several say so (an isolated old leader may still believe it leads).
func (s *Stack) Leader(ctx context.Context) (*TokenNode, error) {
	var best *TokenNode
	var bestTerm uint64
	var errs []error
	for _, t := range s.Tokens {
		if !t.Proc.Running() || t.Proc.Paused() {
			continue
		}
		st, err := s.status(ctx, t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if strings.EqualFold(st.State, "leader") || (st.LeaderID == t.ID && st.State == "") {
			if best == nil || st.Term > bestTerm {
				best, bestTerm = t, st.Term
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no token node leads: %w", errors.Join(append(errs, ErrNoLeader)...))
	}
	return best, nil
}

// WaitLeader polls until some node leads.
func (s *Stack) WaitLeader(ctx context.Context, timeout time.Duration) (*TokenNode, error) {
	var leader *TokenNode
	err := poll.Until(ctx, "token leader", 20*time.Millisecond, timeout, func(ctx context.Context) error {
		l, err := s.Leader(ctx)
		leader = l
		return err
	})
	return leader, err
}

func (s *Stack) startProxies(ctx context.Context) error {
	// The proxy takes user, database and password from each client.
	u, err := url.Parse(s.DB.AdminDSN)
	if err != nil {
		return fmt.Errorf("parse database DSN: %w", err)
	}
	upstream := (&url.URL{Scheme: u.Scheme, Host: u.Host, RawQuery: u.RawQuery}).String()
	addrs, err := freeport.Loopback(2)
	if err != nil {
		return err
	}
	for i, addr := range addrs {
		p := &ProxyNode{Name: fmt.Sprintf("proxy%d", i+1), Addr: addr}
		p.Proc = s.Sup.Add(p.Name, s.cfg.Binary, []string{"proxy", "--listen", addr, "--upstream", upstream})
		if err := p.Proc.Start(); err != nil {
			return err
		}
		s.Proxies = append(s.Proxies, p)
	}
	for i, dsn := range s.ProxyDSNs() {
		if err := s.Proxies[i].Proc.WaitReady(ctx, 20*time.Millisecond, 60*time.Second, func(ctx context.Context) error {
			return servers.PingPostgres(ctx, dsn, s.DB.AppPassword)
		}); err != nil {
			return err
		}
	}
	return nil
}

// ReadState reads the counter and the committed increments directly from
// PostgreSQL.
func (s *Stack) ReadState(ctx context.Context) (DBState, error) {
	var st DBState
	c, err := pgx.Connect(ctx, s.DB.AdminDSN)
	if err != nil {
		return st, fmt.Errorf("connect to %s: %w", s.DBName, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	if err := c.QueryRow(ctx, "SELECT value FROM counter WHERE id = 1").Scan(&st.Counter); err != nil {
		return st, fmt.Errorf("read counter: %w", err)
	}
	rows, err := c.Query(ctx, "SELECT client, op, token, prev FROM increments ORDER BY prev")
	if err != nil {
		return st, fmt.Errorf("read increments: %w", err)
	}
	for rows.Next() {
		var r Row
		if err := rows.Scan(&r.Client, &r.Op, &r.Token, &r.Prev); err != nil {
			return st, fmt.Errorf("read increments: %w", err)
		}
		st.Rows = append(st.Rows, r)
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	s.waitEffects(ctx, c, 30*time.Second)
	rows, err = c.Query(ctx, "SELECT payload->>'client', (payload->>'op')::bigint, idem_key::text, state FROM fencegate.effects ORDER BY id")
	if err != nil {
		return st, fmt.Errorf("read effects: %w", err)
	}
	for rows.Next() {
		var e EffectRow
		if err := rows.Scan(&e.Client, &e.Op, &e.Key, &e.State); err != nil {
			return st, fmt.Errorf("read effects: %w", err)
		}
		st.Effects = append(st.Effects, e)
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	for _, ch := range s.Provider.Charges() {
		st.Charges = append(st.Charges, ch.Key)
	}
	return st, nil
}

// Close kills every process, closes the relays and drops the database.
func (s *Stack) Close() error {
	errs := []error{s.Sup.Close()}
	if s.Provider != nil {
		s.Provider.Close()
	}
	if s.Disk != nil {
		errs = append(errs, s.Disk.Close())
	}
	for _, r := range s.relays {
		r.Close()
	}
	if s.DBName != "" {
		errs = append(errs, devstack.DropFenced(context.Background(), s.cfg.PostgreSQL, s.DBName))
	}
	if err := os.RemoveAll(filepath.Join(s.cfg.Dir, "data")); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
