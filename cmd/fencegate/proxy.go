package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/proxy"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func init() {
	register(&command{
		name:    "proxy",
		summary: "run the PostgreSQL wire-protocol gate in front of a fenced database",
		run:     runProxy,
	})
}

func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	cfg := proxy.DefaultConfig()
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to accept PostgreSQL clients on")
	upstream := fs.String("upstream", "postgres://127.0.0.1:5432?sslmode=disable",
		"upstream PostgreSQL server as postgres://host:port?sslmode=MODE; user, database and password come from each client")
	upSSLMode := fs.String("upstream-sslmode", "", "TLS to the upstream: disable, allow, prefer, require, verify-ca or verify-full; overrides sslmode in --upstream (default: the --upstream sslmode, else prefer)")
	upCA := fs.String("upstream-ca", "", "PEM file of the CA that signed the upstream's certificate, for verify-ca and verify-full (default none: the system roots)")
	tlsCert := fs.String("tls-cert", "", "PEM certificate the proxy presents to clients that ask for TLS (default none: clients' SSLRequest is declined)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert (default none)")
	fs.BoolVar(&cfg.RequireClientTLS, "require-client-tls", false, "refuse clients that do not use TLS; needs --tls-cert (default false)")
	fs.BoolVar(&cfg.AllowPrivilegedRoles, "allow-privileged-roles", false, "admit sessions whose role could switch enforcement off or read the signing keys (superusers, CREATEROLE, REPLICATION, owners of protected tables, of their schemas or of anything in schema fencegate, members of such roles or of pg_execute_server_program, pg_write_server_files, pg_write_all_data, pg_maintain (PostgreSQL 17), pg_read_all_data or pg_read_server_files) instead of refusing them at startup with SQLSTATE FG007 (default false)")
	fs.BoolVar(&cfg.AllowNewerServer, "allow-newer-postgres", false, allowNewerHelp)
	fs.StringVar(&cfg.AdminUpstream, "admin-upstream", "", "`DSN` of a role that may install the fencegate schema (URL or key=value; keep the password in PGPASSFILE or PGPASSWORD): the proxy then repairs the schema itself when a session finds it missing or altered, connecting to the client's database: it installs the schema from nothing only into the database the DSN names, repairs another database only when it already holds schema fencegate, and never touches a template or a database that takes no connections (default none: a session whose database lacks a sound schema is refused with SQLSTATE FG005)")
	fs.DurationVar(&cfg.CheckInterval, "check-interval", cfg.CheckInterval, "how long a passed startup check is trusted: sessions of a database whose schema was found sound, and of a role admitted to it, within this time skip that check (failed checks are never trusted); 0 checks every session")
	metricsAddr := fs.String("metrics-addr", "", "address of the proxy's HTTP server, e.g. 127.0.0.1:9187: Prometheus metrics at /metrics, a readiness check for load balancers at /readyz (200, or 503 and the reason: draining, upstream down, schema not sound) and a liveness check at /healthz (200 until the proxy exits, draining included and whatever the upstream does) (default none: no HTTP server)")
	fs.StringVar(&cfg.HealthUpstream, "health-upstream", "", "`DSN` of a role and database that /readyz logs in to every --health-interval to check the upstream: the login must work and the database's fencegate schema must be sound (URL or key=value; host and port are the --upstream's; an application role will do; keep the password in PGPASSFILE or PGPASSWORD) (default none: /readyz checks only that the upstream answers as PostgreSQL)")
	fs.DurationVar(&cfg.HealthInterval, "health-interval", cfg.HealthInterval, "how often /readyz's upstream check runs (in the background: a request to /readyz gets the last result)")
	drain := fs.Duration("drain-timeout", 10*time.Second, "on SIGINT/SIGTERM, how long open sessions may finish their transaction before they are closed")
	drainDelay := fs.Duration("drain-delay", 0, "on SIGINT/SIGTERM, how long /readyz answers 503 while the proxy still accepts and serves sessions, before it stops accepting and drains: time for load balancers to stop sending clients (a second signal ends the wait)")
	fs.IntVar(&cfg.MaxMessageSize, "max-message-size", cfg.MaxMessageSize, "largest frontend message accepted, in bytes")
	fs.DurationVar(&cfg.PruneOlderThan, "prune-older-than", 0, "prune the marks of the database --admin-upstream names (only that one: another database may take its tokens from another token service) down to the token service's counter as it was this long ago (e.g. 720h), every --prune-interval, through --admin-upstream (required) and the token service at --token-servers: a holder older than that is then refused with FG001, so pick an age well above the longest a lock is ever held (default 0: never prune)")
	fs.DurationVar(&cfg.PruneInterval, "prune-interval", proxy.DefaultPruneInterval, "how often --prune-older-than prunes")
	tokenServers := fs.String("token-servers", "", "comma-separated API URLs of the token service's nodes, asked for the floor of --prune-older-than (default empty: needed only with --prune-older-than)")
	tokenTLS := addTokenTLSFlags(fs)
	fs.DurationVar(&cfg.IdleInTransactionTimeout, "idle-in-transaction-timeout", 0, "close a session that stays idle in a transaction longer than this: PostgreSQL rolls the transaction back and releases its fences, the client gets SQLSTATE 25P03; unlike the server's own setting, no session can turn it off (default 0: off)")
	fs.StringVar(&cfg.ReapUpstream, "reap-db", "", "`DSN` of a role holding pg_signal_backend and nothing more, and of the database to watch (host and port are the --upstream's): with --reap-after, end sessions straight to PostgreSQL whose transaction has held a fence that long (see fencegate reap) (default none)")
	fs.DurationVar(&cfg.ReapAfter, "reap-after", 0, "with --reap-db: how long a transaction may hold a fence before the reaper ends it; above the longest fenced transaction you run")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; every setting is a flag (see --help)", fs.Arg(0))
	}
	up, err := upstreamURL(*upstream, *upSSLMode, *upCA)
	if err != nil {
		return err
	}
	cfg.Upstream = up
	if (*tlsCert == "") != (*tlsKey == "") {
		return usagef("--tls-cert and --tls-key go together; give both or neither")
	}
	if cfg.RequireClientTLS && *tlsCert == "" {
		return usagef("--require-client-tls needs --tls-cert and --tls-key")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "proxy")
	procs, restore := oneProc()
	defer restore()
	if procs != 1 {
		log.Info("running Go code on several threads, as GOMAXPROCS says", "gomaxprocs", procs)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = -1 // proxy.Config reads 0 as "the default"
	}
	cfg.Logger, cfg.Registerer = log, reg
	if *tlsCert != "" {
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return fmt.Errorf("load --tls-cert/--tls-key: %w", err)
		}
		cfg.ClientTLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if cfg.PruneOlderThan < 0 {
		return usagef("--prune-older-than %v is negative; give the age of the oldest holder to keep, e.g. 720h", cfg.PruneOlderThan)
	}
	if cfg.PruneInterval <= 0 {
		return usagef("--prune-interval %v is not positive; e.g. 1h", cfg.PruneInterval)
	}
	if cfg.PruneOlderThan > 0 {
		if cfg.AdminUpstream == "" {
			return usagef("--prune-older-than needs --admin-upstream: only the schema's owner or an administrator may prune marks")
		}
		if *tokenServers == "" {
			return usagef("--prune-older-than needs --token-servers: the token service says which floor is that old")
		}
		tc, err := newClient(*tokenServers, 30*time.Second, tokenTLS)
		if err != nil {
			return err
		}
		defer tc.Close()
		cfg.PruneFloor = tc.Floor
	} else if *tokenServers != "" {
		return usagef("--token-servers is used only with --prune-older-than")
	}
	p, err := proxy.New(cfg)
	if err != nil {
		return usagef("%v", err)
	}
	if err := p.Start(); err != nil {
		return err
	}
	var srv *http.Server
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			p.Close()
			return fmt.Errorf("listen --metrics-addr %s: %w", *metricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.Handle("/readyz", p.ReadyHandler())
		mux.Handle("/healthz", p.LiveHandler())
		srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		log.Info("HTTP listening: /metrics, /readyz, /healthz", "addr", ln.Addr().String())
	}
	fmt.Fprintf(stdout, "fencegate proxy listening on %s, upstream %s\n", p.Addr(), p.Upstream())
	if cfg.AdminUpstream != "" {
		// Say at once when the admin connection does not work, rather than
		// at the first session that needs a repair. Not fatal: the server
		// may come up later.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if c, err := pgx.Connect(cctx, cfg.AdminUpstream); err != nil {
			log.Warn("the --admin-upstream connection does not work; sessions of a database whose schema needs a repair will be refused until it does", "err", err)
		} else {
			_ = c.Close(cctx)
		}
		cancel()
	}
	<-ctx.Done()
	if *drainDelay > 0 {
		// The first signal ended ctx; a second one ends the delay.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		p.Unready()
		log.Info("not ready (/readyz answers 503); still accepting sessions until the drain delay ends or a second signal comes", "drain_delay", drainDelay.String())
		t := time.NewTimer(*drainDelay)
		select {
		case <-t.C:
		case <-sig:
			log.Info("second signal: the drain delay ends now")
		}
		t.Stop()
		signal.Stop(sig)
	}
	log.Info("shutting down", "drain_timeout", drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	err = p.Shutdown(sctx)
	if srv != nil {
		_ = srv.Close()
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// upstreamURL applies --upstream-sslmode and --upstream-ca to --upstream.
func upstreamURL(raw, mode, ca string) (string, error) {
	if mode == "" && ca == "" {
		return raw, nil
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return "", usagef("--upstream-sslmode and --upstream-ca need --upstream as a postgres:// URL, got %q", proxy.RedactDSN(raw))
	}
	q := u.Query()
	if mode != "" {
		q.Set("sslmode", mode)
	}
	if ca != "" {
		q.Set("sslrootcert", ca)
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
