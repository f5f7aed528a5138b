package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"
)

// tokenInitOpts are the flags of 'fencegate token init'.
type tokenInitOpts struct {
	*clientOpts
	initial int64
}

// tokenInitFlags defines the flags of 'fencegate token init'.
func tokenInitFlags(fs *flag.FlagSet) *tokenInitOpts {
	o := &tokenInitOpts{clientOpts: addClientFlags(fs, 30*time.Second)}
	fs.Int64Var(&o.initial, "initial-token", -1, "every token handed out from now on is above this value, e.g. the highest mark of the databases the cluster will fence (required; no default)")
	return o
}

// runTokenInit raises the counter of a running cluster to a floor: a new
// cluster that fences databases which already hold marks (a cluster
// rebuilt from nothing, "fencegate dev --reset") must start above them, or
// every fence fails with FG001 as if a newer holder had written.
func runTokenInit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token init", flag.ContinueOnError)
	o := tokenInitFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "init"); err != nil {
		return err
	}
	if o.initial < 0 {
		return usagef("--initial-token is required and may not be negative: the value every new token must exceed, e.g. the highest mark in 'fencegate marks show'")
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	res, err := c.RaiseCounter(ctx, o.initial)
	if err != nil {
		return clientHint(err)
	}
	if res.After > res.Before {
		fmt.Fprintf(stdout, "counter raised from %d to %d (entry %d, term %d): every token from now on is above %d\n", res.Before, res.After, res.Index, res.Term, res.After)
	} else {
		fmt.Fprintf(stdout, "counter left at %d, already at least %d (entry %d, term %d): the counter never goes down\n", res.After, o.initial, res.Index, res.Term)
	}
	return nil
}
