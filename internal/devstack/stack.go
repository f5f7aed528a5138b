package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
)

// Fixed address of the dev proxy.
const DevProxyAddr = "127.0.0.1:6432"

// StackConfig configures Start. Zero values take the defaults stated.
type StackConfig struct {
	// DataDir holds the token nodes' Raft data and, when one has to be
	// started, PostgreSQL's and Redis's. The default is DefaultDataDir.
	DataDir string
	// Postgres and Redis name the servers to use; see FindPostgres and
	// FindRedis for the defaults.
	Postgres, Redis string
	// ProxyListen is the proxy's address. The default is DevProxyAddr.
	ProxyListen string
	// TokenAPI and TokenRaft are the token nodes' addresses, one per node.
	// The defaults are DevTokenAPIAddrs and DevTokenRaftAddrs.
	TokenAPI, TokenRaft []string
	// Flags names the command-line flag that sets each address, for error
	// messages; keys are "proxy", "token-api", "token-raft", "data-dir",
	// "postgres", "redis". The defaults are "--proxy-listen", "--token-api",
	// "--token-raft", "--data-dir", "--postgres", "--redis".
	Flags map[string]string
	// Logger gets the stack's progress. The default is slog.Default().
	Logger *slog.Logger
	// ServiceLogger gets the logs of the token nodes and the proxy. The
	// default is Logger.
	ServiceLogger *slog.Logger
}

// Stack is the whole fencegate stack on one machine: PostgreSQL, Redis, a
// 3-node token cluster and the proxy.
type Stack struct {
	DataDir  string
	Postgres *Postgres
	Redis    *Redis
	Tokens   *Tokens
	// ProxyAddr is where the proxy listens.
	ProxyAddr string

	closers []func() error
}

func (c *StackConfig) flag(key string) string {
	if f, ok := c.Flags[key]; ok {
		return f
	}
	return map[string]string{"proxy": "--proxy-listen", "token-api": "--token-api", "token-raft": "--token-raft",
		"data-dir": "--data-dir", "postgres": "--postgres", "redis": "--redis"}[key]
}

// Start brings the stack up: it checks every port first, then finds or
// starts PostgreSQL and Redis, starts the token nodes and the proxy. On
// error, whatever was started is stopped again.
func Start(ctx context.Context, cfg StackConfig) (_ *Stack, err error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.ProxyListen == "" {
		cfg.ProxyListen = DevProxyAddr
	}
	if len(cfg.TokenAPI) == 0 {
		cfg.TokenAPI = DevTokenAPIAddrs
	}
	if len(cfg.TokenRaft) == 0 {
		cfg.TokenRaft = DevTokenRaftAddrs
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default().With("component", "devstack")
	}
	if cfg.ServiceLogger == nil {
		cfg.ServiceLogger = cfg.Logger
	}
	if len(cfg.TokenAPI) != len(cfg.TokenRaft) {
		return nil, fmt.Errorf("devstack: %d token API addresses but %d Raft addresses; give as many of each (%s, %s)",
			len(cfg.TokenAPI), len(cfg.TokenRaft), cfg.flag("token-api"), cfg.flag("token-raft"))
	}
	ports := []Port{{Addr: cfg.ProxyListen, What: "proxy", Flag: cfg.flag("proxy")}}
	for i := range cfg.TokenAPI {
		ports = append(ports,
			Port{Addr: cfg.TokenAPI[i], What: fmt.Sprintf("token node n%d API", i+1), Flag: cfg.flag("token-api")},
			Port{Addr: cfg.TokenRaft[i], What: fmt.Sprintf("token node n%d Raft", i+1), Flag: cfg.flag("token-raft")})
	}
	if err := CheckPorts(ports...); err != nil {
		return nil, fmt.Errorf("%w\n(is another fencegate dev running? stop it first)", err)
	}
	s := &Stack{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if s.DataDir, err = PrepareDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if s.Postgres, err = FindPostgres(ctx, PostgresOptions{DSN: cfg.Postgres, Flag: cfg.flag("postgres"), DataDir: s.DataDir, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Postgres.Close)
	if s.Redis, err = FindRedis(ctx, RedisOptions{URL: cfg.Redis, Flag: cfg.flag("redis"), DataDir: s.DataDir, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Redis.Close)
	if s.Tokens, err = StartTokens(ctx, s.DataDir, cfg.TokenAPI, cfg.TokenRaft, cfg.ServiceLogger.With("component", "tokenservice")); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Tokens.Close)
	addr, stop, err := StartProxy(cfg.ProxyListen, s.Postgres.DSN, cfg.ServiceLogger.With("component", "proxy"))
	if err != nil {
		return nil, err
	}
	s.ProxyAddr = addr
	s.closers = append(s.closers, stop)
	return s, nil
}

// Close stops what Start started, in reverse order.
func (s *Stack) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	s.closers = nil
	return errors.Join(errs...)
}

// ProxyDSN is the PostgreSQL DSN through the proxy: the same user, password
// and database as Postgres.DSN, another host and port.
func (s *Stack) ProxyDSN() string { return replaceHost(s.Postgres.DSN, s.ProxyAddr) }

func replaceHost(dsn, hostPort string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return dsn
	}
	u.Host = hostPort
	return u.String()
}

// Describe lists what runs where, for the user.
func (s *Stack) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  PostgreSQL  %s  (%s)\n", redact(s.Postgres.DSN), s.Postgres.Source)
	fmt.Fprintf(&b, "  Redis       %s  (%s)\n", s.Redis.Addr, s.Redis.Source)
	for i, srv := range s.Tokens.Servers {
		fmt.Fprintf(&b, "  token n%d    %s  (raft %s)\n", i+1, srv.APIURL(), srv.RaftAddr())
	}
	fmt.Fprintf(&b, "  proxy       %s  -> PostgreSQL\n", s.ProxyAddr)
	fmt.Fprintf(&b, "  data        %s\n", s.DataDir)
	return b.String()
}
