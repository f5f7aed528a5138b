package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/fencegate/fencegate/raftstore"
)

// tokenInitOpts are the flags of 'fencegate token init'.
type tokenInitOpts struct {
	*clientOpts
	initial int64
	force   bool
}

// tokenInitFlags defines the flags of 'fencegate token init'.
func tokenInitFlags(fs *flag.FlagSet) *tokenInitOpts {
	o := &tokenInitOpts{clientOpts: addClientFlags(fs, 30*time.Second)}
	fs.Int64Var(&o.initial, "initial-token", -1, "every token handed out from now on is above this value, e.g. the highest mark of the databases the cluster will fence (required; no default); at most 2^62 unless --force")
	fs.BoolVar(&o.force, "force", false, "raise the counter above 2^62, closer to the largest token 2^63-1, after which the cluster hands out no more tokens (default false)")
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
	if err := checkCeiling("--initial-token", o.initial, o.force); err != nil {
		return err
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

// checkCeiling refuses, unless forced, a counter value above
// raftstore.CounterCeiling: the cluster would run out of tokens.
func checkCeiling(what string, v int64, force bool) error {
	if v <= raftstore.CounterCeiling || force {
		return nil
	}
	return usagef("%s: raising the counter to %d leaves %d tokens before the largest token %d, after which the cluster hands out none; values above %d (2^62) need --force",
		what, v, int64(math.MaxInt64)-v, int64(math.MaxInt64), int64(raftstore.CounterCeiling))
}
