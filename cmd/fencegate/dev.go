package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/fencegate/fencegate/cmd/internal/devstack"
	"github.com/fencegate/fencegate/internal/pgdb"
	"github.com/fencegate/fencegate/internal/servers"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest/fenceddb"
)

func init() {
	register(&command{name: "dev", summary: "run the whole stack on this machine (3 token nodes, proxy) until Ctrl-C", run: runDev})
}

func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	dataDir := fs.String("data-dir", devstack.DefaultDataDir, "directory for the token nodes' data and any PostgreSQL/Redis the stack starts (default "+devstack.DefaultDataDir+")")
	reset := fs.Bool("reset", false, "empty the data directory before starting, for a fresh stack (its pgpass, the application role's password, is kept); the new token cluster is raised above the highest mark of the database, so old marks keep working (default false)")
	clean := fs.Bool("clean", false, "remove the data directory when the stack stops; the application role stays on the server and the next start needs another --app-role unless it is dropped (default false)")
	pg := fs.String("postgres", "", "PostgreSQL DSN of a superuser, to set the database up and for the proxy's --admin-upstream (default: DATABASE_URL or the PG* variables, else 127.0.0.1:5432 when it answers, else a throwaway server started from the PostgreSQL binaries)")
	rd := fs.String("redis", "", "Redis host:port or redis:// URL (default: REDIS_URL, else 127.0.0.1:6379 when it answers, else a throwaway redis-server)")
	database := fs.String("database", devstack.DefaultDatabase, "database set up for applications: created when missing, schema fencegate installed or upgraded, tables orders and charges protected (default "+devstack.DefaultDatabase+")")
	appRole := fs.String("app-role", devstack.DefaultAppRole, "application role: created (LOGIN, with a password kept in the data directory's pgpass) when missing, granted "+fenceddb.AppPrivileges+" on the demo tables and the fence; it stays on the server (default "+devstack.DefaultAppRole+")")
	ownerRole := fs.String("owner-role", pgfence.DefaultOwnerRole, "NOLOGIN role that owns schema fencegate and the demo tables; created when missing, it stays on the server (default "+pgfence.DefaultOwnerRole+")")
	proxyListen := fs.String("proxy-listen", devstack.DevProxyAddr, "address of the gate proxy (default "+devstack.DevProxyAddr+")")
	tokenAPI := fs.String("token-api", strings.Join(devstack.DevTokenAPIAddrs, ","), "API addresses of the three token nodes (default "+strings.Join(devstack.DevTokenAPIAddrs, ",")+")")
	tokenRaft := fs.String("token-raft", strings.Join(devstack.DevTokenRaftAddrs, ","), "Raft addresses of the three token nodes (default "+strings.Join(devstack.DevTokenRaftAddrs, ",")+")")
	verbose := fs.Bool("v", false, "show the token nodes' and the proxy's logs (default false: warnings only)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	api, raft := splitList(*tokenAPI), splitList(*tokenRaft)
	if len(api) != 3 || len(raft) != 3 {
		return usagef("--token-api and --token-raft each take three HOST:PORT addresses, comma-separated")
	}
	if *reset {
		kept, err := devstack.ResetDataDir(*dataDir)
		if err != nil {
			return err
		}
		if kept {
			fmt.Fprintf(stdout, "emptied %s (kept pgpass: the application role's password)\n", *dataDir)
		} else {
			fmt.Fprintf(stdout, "removed %s\n", *dataDir)
		}
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	svcLog := log
	gate := &quietAfter{Handler: slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}), off: new(atomic.Bool)}
	if !*verbose {
		// Errors only, and none once stopping: nodes that lose their peers
		// while the stack shuts down complain, as they should, but not to us.
		svcLog = slog.New(gate)
	}
	fmt.Fprintln(stdout, "fencegate dev: starting PostgreSQL/Redis (if needed), 3 token nodes and the proxy...")
	st, err := devstack.StartPersistent(ctx, devstack.PersistentConfig{
		DataDir: *dataDir, Postgres: *pg, Redis: *rd, ProxyListen: *proxyListen,
		Database: *database, AppRole: *appRole, OwnerRole: *ownerRole,
		TokenAPI: api, TokenRaft: raft, Logger: log, ServiceLogger: svcLog,
	})
	if err != nil {
		return devFlags.err(err)
	}
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, devFlags.text(st.Describe()))
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "Applications connect as the application role, through the proxy:")
	fmt.Fprintf(stdout, "  psql '%s'\n", st.ProxyDSN())
	fmt.Fprintln(stdout, "    BEGIN; SELECT fencegate.fence('order:42', T); UPDATE orders SET state = 'paid' WHERE id = 42; COMMIT;")
	// The commands below name this binary as the user can run it: after
	// 'make dev' it is ./bin/fencegate, which is not on PATH.
	self := selfCommand()
	fmt.Fprintf(stdout, "    (T from '%s token next order:42' below; without the fence PostgreSQL refuses the UPDATE with FG002,\n", self)
	fmt.Fprintln(stdout, "    and a fence with a token below T afterwards with FG001)")
	fmt.Fprintln(stdout, "Try it:")
	fmt.Fprintf(stdout, "  %s token next order:42 --servers %s\n", self, strings.Join(st.Tokens.URLs, ","))
	where := serverFlags(st, api)
	fmt.Fprintf(stdout, "  %s demo lost-updates%s\n", self, postgresFlags(st, *proxyListen)+where)
	fmt.Fprintln(stdout, "  the examples, once the setup of their README.md has run:")
	fmt.Fprintf(stdout, "  go run ./examples/fenced-transfer -db '%s'%s\n", st.ProxyDSN(), where)
	fmt.Fprintf(stdout, "  go run ./examples/paused-holder -db '%s'%s\n", st.ProxyDSN(), where)
	fmt.Fprintln(stdout)
	fmt.Fprintln(stdout, "Ctrl-C stops everything.")

	<-ctx.Done()
	gate.off.Store(true)
	fmt.Fprintln(stdout, "\nfencegate dev: stopping...")
	err = st.Close()
	if *clean {
		if rerr := devstack.RemoveDataDir(st.DataDir); rerr != nil && err == nil {
			err = rerr
		} else if rerr == nil {
			fmt.Fprintf(stdout, "removed %s\n", st.DataDir)
		}
	}
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "fencegate dev: stopped")
	return nil
}

// postgresFlags returns the flags that name PostgreSQL and the proxy to
// the demo when the stack is not on its default addresses.
func postgresFlags(st *devstack.Stack, proxyListen string) string {
	var b strings.Builder
	if st.Postgres.DSN != pgdb.DefaultAdminDSN {
		fmt.Fprintf(&b, " -postgres '%s'", servers.Redact(st.Postgres.DSN))
	}
	if proxyListen != devstack.DevProxyAddr {
		fmt.Fprintf(&b, " -proxy %s", st.ProxyAddr)
	}
	return b.String()
}

// serverFlags returns the flags that name Redis and the token service to
// the demo and the examples when the stack is not on their default
// addresses.
func serverFlags(st *devstack.Stack, api []string) string {
	var b strings.Builder
	if st.Redis.Addr != servers.DefaultRedisAddr {
		fmt.Fprintf(&b, " -redis %s", st.Redis.Addr)
	}
	if strings.Join(api, ",") != strings.Join(devstack.DevTokenAPIAddrs, ",") {
		fmt.Fprintf(&b, " -tokens %s", strings.Join(st.Tokens.URLs, ","))
	}
	return b.String()
}

// quietAfter passes records to Handler until off is set.
type quietAfter struct {
	slog.Handler
	off *atomic.Bool
}

func (q *quietAfter) Enabled(ctx context.Context, l slog.Level) bool {
	return !q.off.Load() && q.Handler.Enabled(ctx, l)
}

func (q *quietAfter) WithAttrs(a []slog.Attr) slog.Handler {
	return &quietAfter{Handler: q.Handler.WithAttrs(a), off: q.off}
}

func (q *quietAfter) WithGroup(name string) slog.Handler {
	return &quietAfter{Handler: q.Handler.WithGroup(name), off: q.off}
}
