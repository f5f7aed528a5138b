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
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
	"github.com/fencegate/fencegate/tokensign"
)

// Fixed address of the dev proxy.
const DevProxyAddr = "127.0.0.1:6432"

// Fixed addresses of the dev token cluster.
var (
	DevTokenAPIAddrs  = []string{"127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"}
	DevTokenRaftAddrs = []string{"127.0.0.1:7201", "127.0.0.1:7202", "127.0.0.1:7203"}
)

// PersistentConfig configures StartPersistent: the stack "fencegate dev"
// runs, whose data directory, database and roles outlive it and are reused
// by the next start. Zero values take the defaults stated. Error messages
// about a setting name its field ("PersistentConfig.DataDir"), for a
// program to say which of its own settings fixes it.
type PersistentConfig struct {
	// DataDir holds the token nodes' Raft data, the application role's
	// pgpass file and, when one has to be started, PostgreSQL's and
	// Redis's data. The default is DefaultDataDir.
	DataDir string
	// Postgres and Redis name the servers to use; see servers.FindPostgres and
	// servers.FindRedis for the defaults.
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
	// TokenAPI and TokenRaft are the token nodes' addresses, one of each
	// per node. The defaults are DevTokenAPIAddrs and DevTokenRaftAddrs.
	TokenAPI, TokenRaft []string
	// Logger gets the stack's progress. The default is slog.Default().
	Logger *slog.Logger
	// ServiceLogger gets the logs of the token nodes and the proxy. The
	// default is Logger.
	ServiceLogger *slog.Logger
}

// ThrowawayConfig configures StartThrowaway: a stack of one run's own (a
// test, a demo), on free ports, with a fresh temporary data directory and a
// database and roles of random names, all gone after Close. Error messages
// about a setting name its field ("ThrowawayConfig.Postgres").
type ThrowawayConfig struct {
	// Prefix starts the names of the data directory, the database (PREFIX
	// and random characters, NAME) and its roles (NAME_owner, NAME_app).
	// Required: a lowercase SQL identifier such as "fencegate_demo_".
	Prefix string
	// Postgres and Redis name the servers to use; see servers.FindPostgres and
	// servers.FindRedis for the defaults. Redis is not used when RedisMasters is
	// set.
	Postgres, Redis string
	// RedisMasters, when above zero, starts that many Redis masters on
	// free ports (Stack.Masters, for Redlock) instead of finding one server.
	RedisMasters int
	// SigningKeys, when set, has the token nodes sign the tokens they hand
	// out.
	SigningKeys *tokensign.Keyring
	// Logger gets the stack's progress. The default is slog.Default().
	Logger *slog.Logger
	// ServiceLogger gets the logs of the token nodes and the proxy. The
	// default is Logger.
	ServiceLogger *slog.Logger
}

// stackConfig is what StartPersistent and StartThrowaway resolve their
// configuration to, for the one start-up sequence both run: every field
// is set (or empty for "none") and means the same in both. Programs use
// PersistentConfig or ThrowawayConfig.
type stackConfig struct {
	// DataDir is the data directory; TempDataDir says it is to be made
	// (os.MkdirTemp with DataDir as the pattern) and removed at Close.
	DataDir     string
	TempDataDir bool
	// Postgres and Redis name the servers to find ("" for the defaults).
	Postgres, Redis string
	// RedisMasters above zero starts that many masters instead of finding
	// Redis.
	RedisMasters int
	// ProxyListen is the proxy's address (port 0 for a free one).
	ProxyListen string
	// Database, OwnerRole and AppRole are set up for applications;
	// DropDatabase drops the database and the roles at Close.
	Database, OwnerRole, AppRole string
	DropDatabase                 bool
	// TokenAPI and TokenRaft are the token nodes' addresses; both empty
	// puts three nodes on free ports.
	TokenAPI, TokenRaft []string
	SigningKeys         *tokensign.Keyring
	Logger              *slog.Logger
	ServiceLogger       *slog.Logger
	// Settings is the name of the configuration the caller gave
	// ("PersistentConfig"), for error messages.
	Settings string
}

// Stack is the whole fencegate stack on one machine: PostgreSQL, Redis, a
// token cluster and the proxy, and the database set up for applications.
type Stack struct {
	DataDir  string
	Postgres *servers.Postgres
	// Redis is the Redis server found or started; nil when the stack
	// started Masters instead (ThrowawayConfig.RedisMasters).
	Redis *servers.Redis
	// Masters are the Redis masters started for
	// ThrowawayConfig.RedisMasters.
	Masters []*servers.Redis
	Tokens  *Tokens
	// ProxyAddr is where the proxy listens.
	ProxyAddr string
	// DB is the database set up for applications, and its roles.
	DB *FencedDB
	// Floor is where the token counter stands against the database's
	// marks: the start raises it above the highest one.
	Floor Floor
	// Passfile is the pgpass file holding the application role's password,
	// "" when the stack does not know it (a role it did not create).
	Passfile string

	closers []func() error
}

// flag names, for error messages, the configuration field that sets key
// ("postgres", "redis", "data-dir", "app-role", "proxy", "token-api",
// "token-raft"), as Settings.Field.
func (c *stackConfig) flag(key string) string {
	field := map[string]string{"proxy": "ProxyListen", "token-api": "TokenAPI", "token-raft": "TokenRaft",
		"data-dir": "DataDir", "postgres": "Postgres", "redis": "Redis", "app-role": "AppRole"}[key]
	return cmp.Or(c.Settings, "stackConfig") + "." + field
}

// StartPersistent brings up the stack "fencegate dev" runs (see
// PersistentConfig): it checks every port first, then finds or starts
// PostgreSQL and Redis, sets up the database, starts the token nodes and
// the proxy. On error, whatever was started is stopped again; Close stops
// it all and keeps the data directory, the database and the roles.
func StartPersistent(ctx context.Context, cfg PersistentConfig) (*Stack, error) {
	return start(ctx, stackConfig{
		DataDir:       cmp.Or(cfg.DataDir, DefaultDataDir),
		Postgres:      cfg.Postgres,
		Redis:         cfg.Redis,
		ProxyListen:   cmp.Or(cfg.ProxyListen, DevProxyAddr),
		Database:      cmp.Or(cfg.Database, DefaultDatabase),
		OwnerRole:     cmp.Or(cfg.OwnerRole, pgfence.DefaultOwnerRole),
		AppRole:       cmp.Or(cfg.AppRole, DefaultAppRole),
		TokenAPI:      orAddrs(cfg.TokenAPI, DevTokenAPIAddrs),
		TokenRaft:     orAddrs(cfg.TokenRaft, DevTokenRaftAddrs),
		Logger:        cfg.Logger,
		ServiceLogger: cfg.ServiceLogger,
		Settings:      "PersistentConfig",
	})
}

// orAddrs is addrs, or def when addrs is empty.
func orAddrs(addrs, def []string) []string {
	if len(addrs) == 0 {
		return def
	}
	return addrs
}

// StartThrowaway brings up a stack of one run's own (see ThrowawayConfig):
// the same servers and set-up as StartPersistent, on free ports, in a
// temporary data directory, with a database and roles of random names.
// Close stops it all, drops the database and the roles and removes the
// directory.
func StartThrowaway(ctx context.Context, cfg ThrowawayConfig) (*Stack, error) {
	if cfg.Prefix == "" {
		return nil, errors.New("devstack: ThrowawayConfig.Prefix is empty; name the run (e.g. \"fencegate_demo_\")")
	}
	db := pgdb.RandomName(cfg.Prefix)
	return start(ctx, stackConfig{
		DataDir:       cfg.Prefix,
		TempDataDir:   true,
		Postgres:      cfg.Postgres,
		Redis:         cfg.Redis,
		RedisMasters:  cfg.RedisMasters,
		ProxyListen:   "127.0.0.1:0",
		Database:      db,
		OwnerRole:     db + "_owner",
		AppRole:       db + "_app",
		DropDatabase:  true,
		SigningKeys:   cfg.SigningKeys,
		Logger:        cfg.Logger,
		ServiceLogger: cfg.ServiceLogger,
		Settings:      "ThrowawayConfig",
	})
}

// start runs the start-up sequence both constructors share.
func start(ctx context.Context, cfg stackConfig) (_ *Stack, err error) {
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
	ports := []servers.Port{{Addr: cfg.ProxyListen, What: "proxy", Setting: cfg.flag("proxy")}}
	for i := range cfg.TokenAPI {
		ports = append(ports,
			servers.Port{Addr: cfg.TokenAPI[i], What: fmt.Sprintf("token node n%d API", i+1), Setting: cfg.flag("token-api")},
			servers.Port{Addr: cfg.TokenRaft[i], What: fmt.Sprintf("token node n%d Raft", i+1), Setting: cfg.flag("token-raft")})
	}
	if err := servers.CheckPorts(ports...); err != nil {
		return nil, fmt.Errorf("%w (is another fencegate dev running? stop it first)", err)
	}
	s := &Stack{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if cfg.TempDataDir {
		if cfg.DataDir, err = os.MkdirTemp("", cfg.DataDir); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { return os.RemoveAll(cfg.DataDir) })
		// World-traversable, so that a throwaway PostgreSQL running as an
		// unprivileged user can use it.
		if err := os.Chmod(cfg.DataDir, 0o755); err != nil {
			return nil, err
		}
	}
	if s.DataDir, err = prepareDataDir(cfg.DataDir, cfg.flag("data-dir")); err != nil {
		return nil, err
	}
	if s.Postgres, err = servers.FindPostgres(ctx, servers.PostgresOptions{DSN: cfg.Postgres, Setting: cfg.flag("postgres"),
		DataDir: s.DataDir, DataDirSetting: cfg.flag("data-dir"), Logger: cfg.Logger}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.Postgres.Close)
	if cfg.DropDatabase {
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
func (s *Stack) startRedis(ctx context.Context, cfg *stackConfig) (err error) {
	if cfg.RedisMasters <= 0 {
		if s.Redis, err = servers.FindRedis(ctx, servers.RedisOptions{URL: cfg.Redis, Setting: cfg.flag("redis"), DataDir: s.DataDir, Logger: cfg.Logger}); err != nil {
			return err
		}
		s.closers = append(s.closers, s.Redis.Close)
		return nil
	}
	s.Masters, err = servers.StartMasters(ctx, cfg.RedisMasters)
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

// Close stops what StartPersistent or StartThrowaway started, in reverse
// order.
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
	fmt.Fprintf(&b, "  PostgreSQL  %s  (%s)\n", servers.Redact(s.Postgres.DSN), s.Postgres.Source)
	if s.Redis != nil {
		fmt.Fprintf(&b, "  Redis       %s  (%s)\n", s.Redis.Addr, s.Redis.Source)
	}
	for i, m := range s.Masters {
		fmt.Fprintf(&b, "  Redis m%d    %s  (%s, a Redlock master)\n", i+1, m.Addr, m.Source)
	}
	for i, srv := range s.Tokens.Servers {
		fmt.Fprintf(&b, "  token n%d    %s  (raft %s)\n", i+1, srv.APIURL(), srv.RaftAddr())
	}
	fmt.Fprintf(&b, "  proxy       %s  -> PostgreSQL (installs/repairs schema fencegate as the administrator)\n", s.ProxyAddr)
	fmt.Fprintf(&b, "  tokens      %s\n", s.Floor)
	fmt.Fprintf(&b, "  database    %s  (schema fencegate v%d, owner role %s; tables orders, charges protected)\n", DatabaseOf(s.DB.AdminDSN), s.DB.Report.ToVersion, s.DB.Owner)
	fmt.Fprintf(&b, "  app role    %s  (%s on orders, charges; may take fences)\n", s.DB.App, fenceddb.AppPrivileges)
	fmt.Fprintf(&b, "  data        %s\n", s.DataDir)
	return b.String()
}
