package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/fencegate/fencegate/cmd/internal/demo"
)

func init() {
	register(&command{name: "demo", summary: "replay the paused lock holder with and without fencing; refuse forged tokens; lose no update", run: runDemo})
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprintln(stderr, "Usage: fencegate demo paused-holder [--redlock] [flags]")
		fmt.Fprintln(stderr, "       fencegate demo forged-token [flags]")
		fmt.Fprintln(stderr, "       fencegate demo lost-updates [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  paused-holder   Kleppmann's paused lock holder with real processes, three times:")
		fmt.Fprintln(stderr, "                  (a) straight to PostgreSQL, unprotected tables (the stale write lands);")
		fmt.Fprintln(stderr, "                  (b) through the proxy, protected tables (rejected with FG001);")
		fmt.Fprintln(stderr, "                  (c) straight to PostgreSQL, protected tables (rejected with FG001).")
		fmt.Fprintln(stderr, "                  Exits 0 only when (b) and (c) rejected it.")
		fmt.Fprintln(stderr)
		fs := flag.NewFlagSet("demo paused-holder", flag.ContinueOnError)
		pausedHolderFlags(fs, new(demo.Config))
		fs.SetOutput(stderr)
		printFlags(fs)
		fmt.Fprintln(stderr)
		forgedTokenUsage(stderr)
		fmt.Fprintln(stderr)
		ffs := flag.NewFlagSet("demo forged-token", flag.ContinueOnError)
		forgedTokenFlags(ffs, new(demo.ForgedConfig))
		ffs.SetOutput(stderr)
		printFlags(ffs)
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  lost-updates    the lock torture test: K worker processes increment one counter under a")
		fmt.Fprintln(stderr, "                  Redis lock with a short TTL while holders are frozen past it, unfenced")
		fmt.Fprintln(stderr, "                  and fenced (through the proxy); run against 'fencegate dev'. Exits 0 only")
		fmt.Fprintln(stderr, "                  when nothing was lost with the fence. See 'fencegate demo lost-updates --help'.")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  effects         the paused holder against a payment provider on loopback that honours")
		fmt.Fprintln(stderr, "                  Idempotency-Key: charged twice without fencing, once with effects (the stale")
		fmt.Fprintln(stderr, "                  holder's refused with FG001), once after a relay is killed mid-delivery.")
		fmt.Fprintln(stderr, "                  See 'fencegate demo effects --help'.")
		if len(args) == 0 {
			return usagef("name a demo: paused-holder, forged-token or lost-updates")
		}
		return flag.ErrHelp
	}
	switch args[0] {
	case "paused-holder":
		return runPausedHolder(ctx, args[1:], stdout, stderr)
	case "forged-token":
		return runForgedToken(ctx, args[1:], stdout, stderr)
	case "lost-updates":
		return runLostUpdates(ctx, args[1:], stdout, stderr)
	case "effects":
		return runEffectsDemo(ctx, args[1:], stdout, stderr)
	}
	return usagef("unknown demo %q; the demos are paused-holder, forged-token, lost-updates and effects", args[0])
}

func runPausedHolder(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo paused-holder", flag.ContinueOnError)
	var cfg demo.Config
	verbose := pausedHolderFlags(fs, &cfg)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return pausedHolder(ctx, cfg, *verbose, stdout, stderr)
}

// pausedHolderFlags defines the flags of 'fencegate demo paused-holder'.
func pausedHolderFlags(fs *flag.FlagSet, cfg *demo.Config) (verbose *bool) {
	fs.BoolVar(&cfg.Redlock, "redlock", false, "lock on five Redis masters (Redlock) the demo starts; the double grant comes from restarting one without persistence (default false: one Redis and a SIGSTOP)")
	fs.DurationVar(&cfg.TTL, "ttl", 0, "lock TTL (default 1s, 5s with --redlock)")
	fs.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL DSN of a superuser: the demo creates a database and two roles, dropped at the end (default: DATABASE_URL or PG* variables, else 127.0.0.1:5432, else a throwaway server)")
	fs.StringVar(&cfg.Redis, "redis", "", "Redis host:port or redis:// URL (default: REDIS_URL, else 127.0.0.1:6379, else a throwaway server)")
	fs.StringVar(&cfg.Picture, "picture", "", "SVG timeline to write (default "+demo.DefaultPicture+", or "+demo.DefaultRedlockPicture+" with --redlock)")
	return fs.Bool("v", false, "log progress, and the token nodes' and proxy's logs, to stderr (default false)")
}

func pausedHolder(ctx context.Context, cfg demo.Config, verbose bool, stdout, stderr io.Writer) error {
	if cfg.TTL != 0 && cfg.TTL < 100*time.Millisecond {
		return usagef("--ttl %v is too short to watch; use 100ms or more", cfg.TTL)
	}
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if verbose {
		cfg.ServiceLogger = cfg.Logger
	}
	cfg.Out = demoFlags.writer(stdout)
	_, err := demo.PausedHolder(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted; the clients, servers and database it started are gone: %w", ctx.Err())
	}
	return demoFlags.err(err)
}

func forgedTokenUsage(w io.Writer) {
	fmt.Fprintln(w, "  forged-token    a database that requires signed tokens (token cluster signing with a key made")
	fmt.Fprintln(w, "                  for the run) refuses, moving no mark: the largest bigint with a made-up proof")
	fmt.Fprintln(w, "                  (FG008), a genuine token of another resource (FG008), a genuine token of a")
	fmt.Fprintln(w, "                  second cluster with the same key (FG008), the fence without proof (FG003);")
	fmt.Fprintln(w, "                  the lock holder writes before and after. Exits 0 only when all four were")
	fmt.Fprintln(w, "                  refused and both of the holder's writes committed.")
}

// forgedTokenFlags defines the flags of 'fencegate demo forged-token'.
func forgedTokenFlags(fs *flag.FlagSet, cfg *demo.ForgedConfig) (verbose *bool) {
	fs.DurationVar(&cfg.TTL, "ttl", 0, "the holder's lock TTL (default 5s)")
	fs.StringVar(&cfg.Postgres, "postgres", "", "PostgreSQL DSN of a superuser: the demo creates a database and two roles, dropped at the end (default: DATABASE_URL or PG* variables, else 127.0.0.1:5432, else a throwaway server)")
	fs.StringVar(&cfg.Redis, "redis", "", "Redis host:port or redis:// URL (default: REDIS_URL, else 127.0.0.1:6379, else a throwaway server)")
	fs.StringVar(&cfg.Picture, "picture", demo.DefaultForgedPicture, "SVG timeline to write (default "+demo.DefaultForgedPicture+")")
	return fs.Bool("v", false, "log progress, and the token nodes' logs, to stderr (default false)")
}

func runForgedToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo forged-token", flag.ContinueOnError)
	var cfg demo.ForgedConfig
	verbose := forgedTokenFlags(fs, &cfg)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if cfg.TTL != 0 && cfg.TTL < 500*time.Millisecond {
		return usagef("--ttl %v is too short for the holder's writes; use 500ms or more", cfg.TTL)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if *verbose {
		cfg.ServiceLogger = cfg.Logger
	}
	cfg.Out = demoFlags.writer(stdout)
	_, err := demo.ForgedToken(ctx, cfg)
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("interrupted; the servers and database it started are gone: %w", ctx.Err())
	}
	return demoFlags.err(err)
}

func runEffectsDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate demo effects", flag.ContinueOnError)
	var cfg demo.EffectsConfig
	fs.StringVar(&cfg.Postgres, "postgres", "", "DSN of a PostgreSQL server to use, a role that may create databases (default: found as 'fencegate dev' does)")
	fs.StringVar(&cfg.Redis, "redis", "", "host:port of the Redis server to use (default: found as 'fencegate dev' does)")
	fs.DurationVar(&cfg.TTL, "ttl", time.Second, "the lock's time to live")
	fs.StringVar(&cfg.Picture, "picture", demo.DefaultEffectsPicture, "SVG timeline of the three scenes to write (default "+demo.DefaultEffectsPicture+")")
	verbose := fs.Bool("v", false, "log what the demo does")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	cfg.Out = stdout
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("component", "demo")
	_, err := demo.Effects(ctx, cfg)
	return err
}
