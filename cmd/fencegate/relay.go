package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/relay"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

func init() {
	register(&command{name: "relay", summary: "deliver the effects fenced transactions committed to their HTTP targets", run: runRelay})
}

// namedValues is a repeatable NAME=VALUE flag.
type namedValues struct {
	list []string
	m    map[string]string
}

func (n *namedValues) String() string { return strings.Join(n.list, " ") }
func (n *namedValues) Set(s string) error {
	name, val, ok := strings.Cut(s, "=")
	if !ok || name == "" || val == "" {
		return fmt.Errorf("%q is not NAME=VALUE", s)
	}
	if n.m == nil {
		n.m = map[string]string{}
	}
	if _, dup := n.m[name]; dup {
		return fmt.Errorf("%s given twice", name)
	}
	n.m[name] = val
	n.list = append(n.list, name)
	return nil
}

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate relay", flag.ContinueOnError)
	db := fs.String("db", "", "the database whose effects to deliver: a superuser, or a role 'fencegate schema install --relay ROLE' granted (default $DATABASE_URL)")
	var targets, timeouts, concs namedValues
	fs.Var(&targets, "target", "NAME=URL: POST the effects of target NAME to URL (http or https); repeat for each target; effects of other targets stay pending")
	timeout := fs.Duration("timeout", 10*time.Second, "how long one attempt may take, for targets without --target-timeout")
	fs.Var(&timeouts, "target-timeout", "NAME=DURATION: the attempt timeout of one target; repeat")
	conc := fs.Int("concurrency", 8, "effects in flight per target at most (each of another resource), for targets without --target-concurrency")
	fs.Var(&concs, "target-concurrency", "NAME=N: the concurrency of one target; repeat")
	caFile := fs.String("ca-file", "", "PEM file of the CAs that https targets' certificates must chain to (default: the system's roots)")
	clientCert := fs.String("client-cert", "", "PEM client certificate to present to https targets (with --client-key)")
	clientKey := fs.String("client-key", "", "PEM key of --client-cert")
	listen := fs.String("listen", "", "serve /metrics and /healthz on this address, e.g. 127.0.0.1:9465 (default: off)")
	poll := fs.Duration("poll", time.Second, "how often to look for due effects when no notification arrives (retries coming due)")
	minBackoff := fs.Duration("min-backoff", time.Second, "the first retry's wait (doubling up to --max-backoff, with jitter)")
	maxBackoff := fs.Duration("max-backoff", 5*time.Minute, "the longest wait between two attempts of one effect")
	maxAttempts := fs.Int("max-attempts", 0, "fail an effect after this many attempts that asked for a retry (default 0: retry until delivered)")
	retain := fs.Duration("retain", 0, "delete delivered and dropped effects this long after they were settled, e.g. 168h (default 0: keep them)")
	drain := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long the effects in flight may take to finish before the relay abandons them (they stay pending and are sent again with the same key)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q; targets go with --target NAME=URL", fs.Arg(0))
	}
	dsn := *db
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	if dsn == "" {
		return usagef("missing --db DSN: the database whose effects to deliver, or set DATABASE_URL")
	}
	if len(targets.list) == 0 {
		return usagef("missing --target NAME=URL: the relay delivers only to targets it is given")
	}
	var tlsCfg *tls.Config
	if *caFile != "" || *clientCert != "" || *clientKey != "" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				return fmt.Errorf("read --ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("--ca-file %s holds no PEM certificate", *caFile)
			}
			tlsCfg.RootCAs = pool
		}
		if (*clientCert == "") != (*clientKey == "") {
			return usagef("--client-cert and --client-key go together")
		}
		if *clientCert != "" {
			cert, err := tls.LoadX509KeyPair(*clientCert, *clientKey)
			if err != nil {
				return fmt.Errorf("load --client-cert/--client-key: %w", err)
			}
			tlsCfg.Certificates = []tls.Certificate{cert}
		}
	}
	for _, m := range []map[string]string{timeouts.m, concs.m} {
		for name := range m {
			if _, ok := targets.m[name]; !ok {
				return usagef("target %s has a timeout or concurrency but no --target %s=URL", name, name)
			}
		}
	}
	cfg := relay.Config{DSN: dsn, Poll: *poll, MinBackoff: *minBackoff, MaxBackoff: *maxBackoff, MaxAttempts: *maxAttempts, Retain: *retain}
	for _, name := range targets.list {
		t := relay.Target{Name: name, URL: targets.m[name], Timeout: *timeout, Concurrency: *conc, TLS: tlsCfg}
		if s, ok := timeouts.m[name]; ok {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return usagef("--target-timeout %s=%s: not a positive duration (e.g. 5s)", name, s)
			}
			t.Timeout = d
		}
		if s, ok := concs.m[name]; ok {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return usagef("--target-concurrency %s=%s: not a positive number", name, s)
			}
			t.Concurrency = n
		}
		cfg.Targets = append(cfg.Targets, t)
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "relay")
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Logger, cfg.Metrics = log, relay.NewMetrics(reg)
	r, err := relay.New(cfg)
	if err != nil {
		return usagef("%v", err)
	}
	if *listen != "" {
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("listen --listen %s: %w", *listen, err)
		}
		srv := &http.Server{Handler: r.Handler(reg), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		log.Info("HTTP listening: /metrics, /healthz", "addr", ln.Addr().String())
	}
	// ctx ends at the first SIGTERM or interrupt (main): the relay drains.
	// A second signal, or the drain timeout, abandons the effects in flight.
	hard, cancelHard := context.WithCancel(context.Background())
	defer cancelHard()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		<-ctx.Done()
		t := time.NewTimer(*drain)
		defer t.Stop()
		n := 0
		for {
			select {
			case <-sigs:
				if n++; n < 2 {
					continue // the signal that ended ctx
				}
				log.Warn("second signal: abandoning the effects in flight")
			case <-t.C:
				log.Warn("drain timeout: abandoning the effects in flight", "drain_timeout", *drain)
			case <-hard.Done():
				return
			}
			cancelHard()
			return
		}
	}()
	return r.Run(ctx, hard)
}
