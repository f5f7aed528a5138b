package demo

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

	"github.com/fencegate/fencegate/internal/devstack"
	"github.com/fencegate/fencegate/internal/freeport"
	"github.com/fencegate/fencegate/tokensign"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// stackOptions says what a demo's stack holds.
type stackOptions struct {
	postgres, redis string // DSN and address given by the user, "" to find one
	redlock         bool   // five Redis masters started for the run instead of one server
	// signed has the token cluster sign its tokens with a key made for the
	// run (in the run's temporary directory); its nodes then run on free
	// ports, leaving the dev ports alone.
	signed      bool
	log, svcLog *slog.Logger
}

// stack is what a demo run needs: PostgreSQL with a fresh database, Redis
// (one server, or five masters for Redlock), the token cluster and the proxy.
type stack struct {
	log       *slog.Logger
	svcLog    *slog.Logger
	tmp       string
	pg        *devstack.Postgres
	redis     *devstack.Redis    // single-node mode
	masters   []*devstack.Redis  // Redlock mode
	tokenURLs []string           // token service API URLs
	clusterID string             // the token cluster's id
	keys      *tokensign.Keyring // the run's signing key, when signed
	proxyAddr string             // fencegate proxy, host:port
	adminDSN  string
	dbName    string
	db        *devstack.FencedDB // the demo database's roles
	closers   []func()           // run in reverse order by close
}

// startStack starts the stack: PostgreSQL (found or throwaway), Redis, a
// database of the demo's own with its roles, a 3-node token cluster in this
// process, and the proxy. On error, whatever was started is stopped again.
func startStack(ctx context.Context, o stackOptions) (_ *stack, err error) {
	s := &stack{log: o.log, svcLog: o.svcLog}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	// World-traversable, so that a throwaway PostgreSQL running as an
	// unprivileged user can use it.
	if s.tmp, err = os.MkdirTemp("", "fencegate-demo-"); err != nil {
		return nil, err
	}
	if err := os.Chmod(s.tmp, 0o755); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { os.RemoveAll(s.tmp) })

	if s.pg, err = devstack.FindPostgres(ctx, devstack.PostgresOptions{DSN: o.postgres, DataDir: s.tmp, Logger: s.log}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { s.pg.Close() })
	if o.redlock {
		addrs, err := freeport.Loopback(5)
		if err != nil {
			return nil, err
		}
		for i, addr := range addrs {
			r, err := devstack.StartRedis(ctx, addr, "")
			if err != nil {
				return nil, fmt.Errorf("%w: start Redis master %d of 5 for Redlock: %v; install Redis (apt-get install redis-server)", devstack.ErrNoRedis, i+1, err)
			}
			s.masters = append(s.masters, r)
			s.closers = append(s.closers, func() { r.Close() })
		}
	} else {
		if s.redis, err = devstack.FindRedis(ctx, devstack.RedisOptions{URL: o.redis, DataDir: s.tmp, Logger: s.log}); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() { s.redis.Close() })
	}

	if err := s.createDatabase(ctx); err != nil {
		return nil, err
	}
	if err := s.startTokens(ctx, o.signed); err != nil {
		return nil, err
	}
	if err := s.startProxy(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// createDatabase makes a database of the demo's own, with schema fencegate
// installed and two roles of the demo's own: the NOLOGIN owner of the schema
// and of the tables, and the application role the clients log in as. Close
// drops the database, then the roles.
func (s *stack) createDatabase(ctx context.Context) error {
	s.adminDSN = s.pg.DSN
	s.dbName = randomName("fencegate_demo_")
	owner, app := randomName("fencegate_demo_owner_"), randomName("fencegate_demo_app_")
	// Closers run in reverse order: the roles go after the database.
	s.closers = append(s.closers, func() {
		if err := devstack.DropRoles(context.Background(), s.adminDSN, []string{s.dbName}, app, owner); err != nil {
			s.log.Warn("drop demo roles", "err", err)
		}
	})
	if _, err := devstack.CreateDatabase(ctx, s.adminDSN, s.dbName); err != nil {
		return fmt.Errorf("%s: %w", s.pg.Source, err)
	}
	s.closers = append(s.closers, func() {
		if err := devstack.DropDatabase(context.Background(), s.adminDSN, s.dbName); err != nil {
			s.log.Warn("drop demo database", "db", s.dbName, "err", err)
		}
	})
	db, err := devstack.SetupFenced(ctx, devstack.FencedOptions{AdminDSN: s.directDSN(), Owner: owner, App: app})
	if err != nil {
		return err
	}
	s.db = db
	return nil
}

// directDSN connects straight to the demo database as the administrator.
func (s *stack) directDSN() string { return withDB(s.adminDSN, s.dbName, "") }

// appDSN connects to the demo database as the application role, through
// the proxy when proxied, else straight to PostgreSQL. The password is not
// in it: the clients get it in their environment.
func (s *stack) appDSN(proxied bool) string {
	if proxied {
		return s.db.AppDSN(s.proxyAddr)
	}
	return s.db.AppDSN("")
}

func withDB(dsn, db, host string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	u.Path = "/" + db
	if host != "" {
		u.Host = host
	}
	return u.String()
}

// redisAddrs returns the Redis address(es) clients lock on.
func (s *stack) redisAddrs() []string {
	if s.redis != nil {
		return []string{s.redis.Addr}
	}
	var out []string
	for _, m := range s.masters {
		out = append(out, m.Addr)
	}
	return out
}

// startTokens starts the 3-node Raft token group in this process. Unsigned,
// it runs on the dev addresses when they are free, else on free ports;
// signed, with a key made for the run, on free ports.
func (s *stack) startTokens(ctx context.Context, signed bool) error {
	o := devstack.TokenOptions{DataDir: filepath.Join(s.tmp, "tokens"), Logger: s.svcLog.With("component", "tokenservice")}
	if signed {
		keyFile, err := writeRunKey(s.tmp)
		if err != nil {
			return err
		}
		if s.keys, err = tokensign.LoadKeys(keyFile); err != nil {
			return err
		}
		o.SigningKeys = s.keys
		o.DataDir = filepath.Join(s.tmp, "tokens-trusted")
		o.Logger = o.Logger.With("cluster", "trusted")
	} else {
		var err error
		if o.API, err = devstack.PreferAddrs(devstack.DevTokenAPIAddrs...); err != nil {
			return err
		}
		if o.Raft, err = devstack.PreferAddrs(devstack.DevTokenRaftAddrs...); err != nil {
			return err
		}
	}
	t, err := devstack.StartTokens(ctx, o)
	if t != nil {
		s.closers = append(s.closers, func() { t.Close() })
	}
	if err != nil {
		return err
	}
	s.tokenURLs, s.clusterID = t.URLs, t.ClusterID
	return nil
}

// startProxy starts the gate proxy in this process, in front of the
// PostgreSQL in use, on the dev address when it is free. It may repair the
// schema as the administrator (it finds it sound: createDatabase installed
// it), and admits the application role only.
func (s *stack) startProxy(ctx context.Context) error {
	listen := devstack.DevProxyAddr
	if !devstack.PortFree(listen) {
		listen = "127.0.0.1:0"
	}
	addr, stop, err := devstack.StartProxy(devstack.ProxyOptions{Listen: listen, Upstream: s.adminDSN,
		AdminUpstream: s.adminDSN, OwnerRole: s.db.Owner, Logger: s.svcLog.With("component", "proxy")})
	if err != nil {
		return err
	}
	s.closers = append(s.closers, func() { stop() })
	s.proxyAddr = addr
	return nil
}

// lockHolders reads the lock key key on every Redlock master.
func (s *stack) lockHolders(ctx context.Context, key string) ([]string, error) {
	out := make([]string, len(s.masters))
	for i, m := range s.masters {
		c := redis.NewClient(m.Options)
		v, err := c.Get(ctx, key).Result()
		c.Close()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, fmt.Errorf("read lock on Redis master %d: %w", i+1, err)
		default:
			out[i] = v
		}
	}
	return out, nil
}

// sessions describes the PostgreSQL sessions on the demo database: who
// waits for what, and who blocks it. A client that got stuck adds it to its
// error.
func (s *stack) sessions() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, cerr := pgx.Connect(ctx, s.adminDSN)
	if cerr != nil {
		return "; PostgreSQL sessions unknown: " + cerr.Error()
	}
	defer conn.Close(context.Background())
	rows, qerr := conn.Query(ctx, `SELECT pid, coalesce(client_port, 0), coalesce(state, ''),
		coalesce(wait_event_type || ':' || wait_event, ''), pg_blocking_pids(pid)::text,
		coalesce(extract(epoch FROM now() - xact_start)::text, '-'), left(query, 120)
		FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid() ORDER BY pid`, s.dbName)
	if qerr != nil {
		return "; PostgreSQL sessions unknown: " + qerr.Error()
	}
	var b strings.Builder
	b.WriteString("; PostgreSQL sessions on " + s.dbName + " (pid, client port, state, waits for, blocked by, transaction age s, last query):")
	for rows.Next() {
		var pid, port int
		var state, wait, blockers, age, query string
		if rows.Scan(&pid, &port, &state, &wait, &blockers, &age, &query) == nil {
			fmt.Fprintf(&b, "\n  %d %d %s %s %s %s %q", pid, port, state, wait, blockers, age, query)
		}
	}
	if rows.Err() != nil {
		b.WriteString("\n  " + rows.Err().Error())
	}
	return b.String()
}

func (s *stack) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	s.closers = nil
}
