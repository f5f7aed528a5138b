package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencegate/fencegate/tokenservice"
)

// tokenFloorOpts are the flags of 'fencegate token floor'.
type tokenFloorOpts struct {
	*clientOpts
	age     string
	verbose bool
}

// tokenFloorFlags defines the flags of 'fencegate token floor'.
func tokenFloorFlags(fs *flag.FlagSet) *tokenFloorOpts {
	o := &tokenFloorOpts{clientOpts: addClientFlags(fs, 10*time.Second)}
	fs.StringVar(&o.age, "age", "", "how old a holder must be to fall below the floor: a `DURATION` (90m, 24h) or a number of days (30d); required")
	fs.BoolVar(&o.verbose, "v", false, "also print the time of the checkpoint the floor comes from (default false; on a terminal it is printed anyway)")
	return o
}

// runTokenFloor prints the counter as it was at least --age ago: a floor
// that refuses only fences of holders that asked for their token before
// then.
func runTokenFloor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token floor", flag.ContinueOnError)
	o := tokenFloorFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "floor"); err != nil {
		return err
	}
	if o.age == "" {
		return usagef("--age is required: how old a holder must be to fall below the floor, e.g. --age 24h or --age 30d")
	}
	age, err := tokenservice.ParseAge(o.age)
	if err != nil {
		return usagef("--age %q is not a duration of 0 or more; give e.g. 90m, 24h or 30d", o.age)
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	a, err := c.FloorAt(ctx, age)
	if err != nil {
		return err
	}
	if !o.verbose && !isTerminal(stdout) {
		_, err = fmt.Fprintln(stdout, a.Floor)
		return err
	}
	at := "no checkpoint is that old"
	if !a.At.IsZero() {
		at = "checkpoint of " + a.At.UTC().Format(time.RFC3339) + ", " + time.Since(a.At).Round(time.Second).String() + " ago by this machine's clock"
	}
	_, err = fmt.Fprintf(stdout, "%d\t(%s; answered by %s)\n", a.Floor, at, a.NodeID)
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
