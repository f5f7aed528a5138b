package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Flags are the command-line flags the proxy and tokens commands share
// (locks keeps its own, shorter ones).
type Flags struct {
	// Runs is how many measured runs each figure is the median of.
	Runs int
	// Duration is the length of one measured run of one system at one
	// concurrency.
	Duration time.Duration
	// Warmup is the load applied to a system before each measured run.
	Warmup time.Duration
	// Concurrency lists the numbers of concurrent clients to measure.
	Concurrency IntList
	// JSON prints the results as JSON on stdout instead of a table.
	JSON bool
	// Keep leaves the temporary directories (data, logs, configs) in place.
	Keep bool
	// FencegateBin is the fencegate binary to run; empty builds one
	// (see Fencegate).
	FencegateBin string
}

// Register defines the flags on fs with their defaults; conc is the default
// concurrency list.
func (f *Flags) Register(fs *flag.FlagSet, conc []int) {
	f.Concurrency = append(IntList(nil), conc...)
	fs.IntVar(&f.Runs, "runs", 3, "measured `N` runs per figure; the table shows their median")
	fs.DurationVar(&f.Duration, "duration", 5*time.Second, "length of one measured run")
	fs.DurationVar(&f.Warmup, "warmup", time.Second, "load applied before each measured run and not counted (0 turns it off)")
	fs.Var(&f.Concurrency, "concurrency", "comma-separated `LIST` of client counts")
	fs.BoolVar(&f.JSON, "json", false, "print the results as JSON on stdout instead of a table (default false)")
	fs.BoolVar(&f.Keep, "keep", false, "keep the temporary directories (data, logs, configs) for debugging (default false)")
	fs.StringVar(&f.FencegateBin, "fencegate-bin", "", "fencegate binary to run (default: build the fencegate module's cmd/fencegate into the temporary directory)")
}

// ParseSystems splits the comma-separated --systems value list and checks
// each name against known.
func ParseSystems(list string, known []string) ([]string, error) {
	names := strings.Split(list, ",")
	for _, s := range names {
		if !slices.Contains(known, s) {
			return nil, Usagef("unknown system %q in --systems; choose from %s", s, strings.Join(known, ","))
		}
	}
	return names, nil
}

// Validate reports the first flag value that makes no sense.
func (f *Flags) Validate() error {
	switch {
	case f.Runs < 1:
		return errors.New("--runs must be at least 1")
	case f.Duration <= 0:
		return errors.New("--duration must be positive, e.g. 5s")
	case f.Warmup < 0:
		return errors.New("--warmup must not be negative")
	case len(f.Concurrency) == 0:
		return errors.New("--concurrency needs at least one client count, e.g. 1,64")
	}
	return nil
}

// UsageError marks a mistake in the command line (exit status 2).
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, a ...any) error {
	return UsageError{fmt.Errorf(format, a...)}
}

// ExitCode prints err, if any, as "NAME: ERR" on stderr and returns the
// exit status: 0 for success or --help, 2 for a UsageError, else 1.
func ExitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(UsageError)):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
}

// IntList is a flag.Value holding a comma-separated list of positive integers.
type IntList []int

// String returns the list as "1,64".
func (l *IntList) String() string {
	parts := make([]string, len(*l))
	for i, n := range *l {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// Set parses "1,64", replacing the current list.
func (l *IntList) Set(s string) error {
	var out IntList
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return fmt.Errorf("%q is not a positive integer; want a list like 1,64", p)
		}
		out = append(out, n)
	}
	*l = out
	return nil
}
