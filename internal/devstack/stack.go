package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/tokensign"
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
	// Database is the database the stack sets up for applications: created
	// when missing, with schema fencegate installed (or upgraded) and the
	// demo tables protected. The default is DefaultDatabase.
	Database string
	// OwnerRole owns schema fencegate and the demo tables (NOLOGIN, created
	// when missing). The default is pgfence.DefaultOwnerRole.
	OwnerRole string
	// AppRole is the application role (LOGIN, created when missing, with
	// the grants of an application and nothing more). The default is
	// DefaultAppRole.
	AppRole string
	// TokenAPI and TokenRaft are the token nodes' addresses, one per node.
	// The defaults are DevTokenAPIAddrs and DevTokenRaftAddrs.
	TokenAPI, TokenRaft []string
	// Flags names the command-line flag that sets each address, for error
	// messages; keys are "proxy", "token-api", "token-raft", "data-dir",
	// "postgres", "redis", "app-role". The defaults are "--proxy-listen",
	// "--token-api", "--token-raft", "--data-dir", "--postgres", "--redis",
	// "--app-role".
	Flags map[string]string
	// Logger gets the stack's progress. The default is slog.Default().
	Logger *slog.Logger
	// ServiceLogger gets the logs of the token nodes and the proxy. The
	// default is Logger.
	ServiceLogger *slog.Logger
	// Throwaway, when set, makes the stack a run's own: its data directory
	// is a fresh temporary one (DataDir is ignored), its database and roles
	// get random names starting with Throwaway (NAME, NAME_owner and
	// NAME_app; Database, OwnerRole and AppRole are ignored), and its token
	// nodes and proxy run on free ports unless TokenAPI, TokenRaft or
	// ProxyListen say otherwise. Close drops the database and the roles and
	// removes the directory.
	Throwaway string
	// RedisMasters, when above zero, starts that many Redis masters on
	// free ports (Stack.Masters, for Redlock) instead of finding one server.
	RedisMasters int
	// SigningKeys, when set, has the token nodes sign the tokens they hand
	// out.
	SigningKeys *tokensign.Keyring
}

// Stack is the whole fencegate stack on one machine: PostgreSQL, Redis, a
// 3-node token cluster and the proxy.
type Stack struct {
	DataDir  string
	Postgres *Postgres
	Redis    *Redis
	// Masters are the Redis masters started for StackConfig.RedisMasters;
	// Redis is nil then.
	Masters []*Redis
	Tokens  *Tokens
	// ProxyAddr is where the proxy listens.
	ProxyAddr string
	// DB is the database set up for applications, and its roles.
	DB *FencedDB
	// Floor is where the token counter stands against the database's
	// marks: Start raises it above the highest one.
	Floor Floor
	// Passfile is the pgpass file holding the application role's password,
	// "" when the stack does not know it (a role it did not create).
	Passfile string

	closers []func() error
}

func (c *StackConfig) flag(key string) string {
	if f, ok := c.Flags[key]; ok {
		return f
	}
	return map[string]string{"proxy": "--proxy-listen", "token-api": "--token-api", "token-raft": "--token-raft",
		"data-dir": "--data-dir", "postgres": "--postgres", "redis": "--redis", "app-role": "--app-role"}[key]
}

// Start brings the stack up: it checks every port first, then finds or
// starts PostgreSQL and Redis, starts the token nodes and the proxy. On
// error, whatever was started is stopped again.
func Start(ctx context.Context, cfg StackConfig) (_ *Stack, err error) {
	if cfg.Throwaway == "" {
		cfg.DataDir = cmp.Or(cfg.DataDir, DefaultDataDir)
		cfg.ProxyListen = cmp.Or(cfg.ProxyListen, DevProxyAddr)
		if len(cfg.TokenAPI) == 0 {
			cfg.TokenAPI = DevTokenAPIAddrs
		}
		if len(cfg.TokenRaft) == 0 {
			cfg.TokenRaft = DevTokenRaftAddrs
		}
		cfg.Database = cmp.Or(cfg.Database, DefaultDatabase)
		cfg.AppRole = cmp.Or(cfg.AppRole, DefaultAppRole)
		cfg.OwnerRole = cmp.Or(cfg.OwnerRole, pgfence.DefaultOwnerRole)
	} else {
		cfg.ProxyListen = cmp.Or(cfg.ProxyListen, "127.0.0.1:0")
		cfg.Database = pgdb.RandomName(cfg.Throwaway)
		cfg.OwnerRole, cfg.AppRole = cfg.Database+"_owner", cfg.Database+"_app"
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
	if cfg.Throwaway != "" {
		// World-traversable, so that a throwaway PostgreSQL running as an
		// unprivileged user can use it.
		if cfg.DataDir, err = os.MkdirTemp("", cfg.Throwaway); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { return os.RemoveAll(cfg.DataDir) })
		if err := os.Chmod(cfg.DataDir, 0o755); err != nil {
			return nil, err
		}
	}
	if s.DataDir, err = PrepareDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	if s.Postgres, err = FindPostgres(ctx, PostgresOptions{DSN: cfg.Postgres, Flag: cfg.flag("postgres"), DataDir: s.DataDir, Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Postgres.Close)
	if cfg.Throwaway != "" {
		s.closers = append(s.closers, func() error { return DropFenced(context.Background(), s.Postgres.DSN, cfg.Database) })
	}
	if err := s.setupDatabase(ctx, &cfg); err != nil {
		return nil, err
	}
	if err := s.startRedis(ctx, &cfg); err != nil {
		return nil, err
	}
	if s.Tokens, err = StartTokens(ctx, TokenOptions{DataDir: filepath.Join(s.DataDir, "tokens"), API: cfg.TokenAPI, Raft: cfg.TokenRaft,
		SigningKeys: cfg.SigningKeys, Logger: cfg.ServiceLogger.With("component", "tokenservice")}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Tokens.Close)
	if s.Floor, err = RaiseAboveMarks(ctx, s.DB.AdminDSN, s.Tokens.URLs); err != nil {
		return nil, err
	}
	addr, stop, err := StartProxy(ProxyOptions{Listen: cfg.ProxyListen, Upstream: s.Postgres.DSN,
		AdminUpstream: s.Postgres.DSN, OwnerRole: cfg.OwnerRole, Logger: cfg.ServiceLogger.With("component", "proxy")})
	if err != nil {
		return nil, err
	}
	s.ProxyAddr = addr
	s.closers = append(s.closers, stop)
	return s, nil
}

// startRedis finds the Redis server to use, or starts the Redis masters
// cfg asks for.
func (s *Stack) startRedis(ctx context.Context, cfg *StackConfig) (err error) {
	if cfg.RedisMasters <= 0 {
		if s.Redis, err = FindRedis(ctx, RedisOptions{URL: cfg.Redis, Flag: cfg.flag("redis"), DataDir: s.DataDir, Logger: cfg.Logger}); err != nil {
			return err
		}
		s.closers = append(s.closers, s.Redis.Close)
		return nil
	}
	s.Masters, err = StartMasters(ctx, cfg.RedisMasters)
	for _, r := range s.Masters {
		s.closers = append(s.closers, r.Close)
	}
	return err
}

// RedisAddrs are the addresses of the Redis server or of the masters.
func (s *Stack) RedisAddrs() []string {
	if s.Redis != nil {
		return []string{s.Redis.Addr}
	}
	var out []string
	for _, m := range s.Masters {
		out = append(out, m.Addr)
	}
	return out
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

// ProxyDSN is the DSN applications use: the application role, through the
// proxy, to the stack's database. It holds no password: when the stack
// knows one, the DSN names the passfile that holds it (libpq and pgx read
// it).
func (s *Stack) ProxyDSN() string { return s.appDSN(s.ProxyAddr) }

// DirectDSN is the application role's DSN straight to PostgreSQL: the
// fences hold there too, since PostgreSQL itself enforces them.
func (s *Stack) DirectDSN() string { return s.appDSN("") }

func (s *Stack) appDSN(host string) string {
	dsn := s.DB.AppDSN(host)
	if s.Passfile == "" {
		return dsn
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set("passfile", s.Passfile)
	u.RawQuery = q.Encode()
	return u.String()
}

// Describe lists what runs where, for the user.
func (s *Stack) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  PostgreSQL  %s  (%s)\n", Redact(s.Postgres.DSN), s.Postgres.Source)
	fmt.Fprintf(&b, "  Redis       %s  (%s)\n", s.Redis.Addr, s.Redis.Source)
	for i, srv := range s.Tokens.Servers {
		fmt.Fprintf(&b, "  token n%d    %s  (raft %s)\n", i+1, srv.APIURL(), srv.RaftAddr())
	}
	fmt.Fprintf(&b, "  proxy       %s  -> PostgreSQL (installs/repairs schema fencegate as the administrator)\n", s.ProxyAddr)
	fmt.Fprintf(&b, "  tokens      %s\n", s.Floor)
	fmt.Fprintf(&b, "  database    %s  (schema fencegate v%d, owner role %s; tables orders, charges protected)\n", DatabaseOf(s.DB.AdminDSN), s.DB.Report.ToVersion, s.DB.Owner)
	fmt.Fprintf(&b, "  app role    %s  (%s on orders, charges; may take fences)\n", s.DB.App, AppPrivileges)
	fmt.Fprintf(&b, "  data        %s\n", s.DataDir)
	return b.String()
}
