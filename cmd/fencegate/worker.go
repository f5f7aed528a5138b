package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/fencegate/fencegate/cmd/internal/demo"
	"github.com/fencegate/fencegate/cmd/internal/demo/lostupdates"
	"github.com/fencegate/fencegate/cmd/internal/faults"
	"github.com/fencegate/fencegate/cmd/internal/worker"
)

func init() {
	register(&command{name: worker.Command, summary: "a worker process that fencegate starts itself", run: runWorker, hidden: true})
}

// runWorker is 'fencegate worker KIND': one of the processes the demos and
// the fault campaign start from this binary, configured as package worker
// says. It reports events on stdout and logs on stderr.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) != 1 {
		return usagef("name a worker kind: %s", strings.Join(worker.Kinds, ", "))
	}
	var err error
	switch args[0] {
	case worker.DemoClient:
		var c demo.ClientConfig
		if err = worker.ReadConfig(&c); err != nil {
			return err
		}
		err = demo.RunClient(ctx, &c, os.Stdin, stdout)
	case worker.LostUpdates:
		err = lostupdates.RunWorker(ctx)
	case worker.FaultsClient:
		// The workload client of the fault campaign, one process per
		// client so that the nemesis can SIGSTOP it.
		var c faults.ClientConfig
		if err = worker.ReadConfig(&c); err != nil {
			return err
		}
		c.Logger = slog.New(slog.NewTextHandler(stderr, nil))
		err = faults.RunClient(ctx, c, stdout)
	default:
		return usagef("unknown worker kind %q; the kinds are %s", args[0], strings.Join(worker.Kinds, ", "))
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
