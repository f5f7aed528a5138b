package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/faults"
)

// runFaultsClient is the workload client of the fault campaign, one process
// per client so that the nemesis can SIGSTOP it. The campaign starts it;
// it writes its history events to stdout and its logs to stderr.
func runFaultsClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate faults client", flag.ContinueOnError)
	id := fs.String("id", "c1", "the client's name in the history")
	tokens := fs.String("tokens", "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103", "token service API URLs, comma-separated")
	redisAddrs := fs.String("redis", "127.0.0.1:6379", "Redis masters, comma-separated: one for a single-node lock, several for Redlock")
	dsns := fs.String("dsn", "postgres://postgres@127.0.0.1:6432/postgres?sslmode=disable", "the database through each proxy, as an application role, comma-separated; used in turn (the password, if any, in PGPASSWORD, never here)")
	resource := fs.String("resource", faults.Resource, "the locked and fenced resource: the one the protected tables' rows belong to")
	ttl := fs.Duration("ttl", time.Second, "lock TTL")
	work := fs.Duration("work", 250*time.Millisecond, "the most the client waits between its token and its write")
	seed := fs.Int64("seed", 1, "seed of the client's random work times")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	return faults.RunClient(ctx, faults.ClientConfig{
		ID: *id, Tokens: strings.Split(*tokens, ","), Redis: strings.Split(*redisAddrs, ","),
		DSNs: strings.Split(*dsns, ","), Resource: *resource, TTL: *ttl, Work: *work, Seed: *seed,
		Logger: slog.New(slog.NewTextHandler(stderr, nil)),
	}, stdout)
}
