package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/fencegate/fencegate/internal/devstack/servers"
	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
)

// tokenSource returns the token service client the full-cycle scenarios
// use: for the servers given with -token-servers, or else for 3 nodes
// started in this process on free ports with temporary data directories.
// The returned function stops what was started.
func tokenSource(ctx context.Context, cfg config, stderr io.Writer) (lockclient.TokenSource, func(), error) {
	if len(cfg.tokenURLs) > 0 {
		c, err := tokenclient.NewClient(cfg.tokenURLs)
		if err != nil {
			return nil, nil, err
		}
		return c, func() { c.Close() }, nil
	}
	fmt.Fprintln(stderr, "starting a 3-node token cluster in-process")
	dir, err := os.MkdirTemp("", "fencegate-bench-locks-")
	if err != nil {
		return nil, nil, err
	}
	toks, err := servers.StartTokens(ctx, servers.TokenOptions{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	stop := func() {
		toks.Close()
		os.RemoveAll(dir)
	}
	c, err := tokenclient.NewClient(toks.URLs)
	if err != nil {
		stop()
		return nil, nil, err
	}
	// The first token, before any measurement.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.NextToken(wctx, "bench:warmup"); err != nil {
		c.Close()
		stop()
		return nil, nil, fmt.Errorf("token cluster did not come up: %w", err)
	}
	return c, func() { c.Close(); stop() }, nil
}
