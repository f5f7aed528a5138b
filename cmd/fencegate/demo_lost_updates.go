package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/fencegate/fencegate/cmd/internal/demo/lostupdates"
)

// runLostUpdates is 'fencegate demo lost-updates': K worker processes (this
// binary again) increment one counter under a Redis lock while a chaos loop
// freezes lock holders, straight to PostgreSQL and through the proxy. It
// fails with lostupdates.ErrLost when the run through the proxy lost
// anything.
func runLostUpdates(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := lostupdates.DefaultConfig()
	fs := flag.NewFlagSet("demo lost-updates", flag.ContinueOnError)
	cfg.Register(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := cfg.Check(); err != nil {
		return usagef("%v", err)
	}
	rep, err := lostupdates.Run(ctx, cfg, stdout)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted; the workers are gone: %w", ctx.Err())
		}
		return err
	}
	if !rep.ProxySafe() {
		return lostupdates.ErrLost
	}
	return nil
}
