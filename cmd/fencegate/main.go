// Command fencegate runs the fencegate fencing-token service, the PostgreSQL
// fencing proxy, a one-command development stack and the demos.
//
// Every subcommand registers itself (see register) from its own file, so the
// parts of the binary stay independent:
//
//	fencegate token serve|next|status   the Raft token service and its client
//	fencegate proxy                     the PostgreSQL wire-protocol fencing proxy
//	fencegate dev                       the whole stack on one machine
//	fencegate demo ...                  replays of the paused-holder scenario
//
// Run "fencegate COMMAND --help" for the flags of each command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/fencegate/fencegate/pgfence"
)

// command is one top-level subcommand of the fencegate binary.
type command struct {
	name    string
	summary string
	// run executes the command. args excludes the command name. A returned
	// error wrapping flag.ErrHelp exits 0; a usageError exits 2; any other
	// error exits 1 after being printed as "fencegate NAME: ERR".
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// hidden leaves the command out of the usage: fencegate runs it itself.
	hidden bool
}

var commands = map[string]*command{}

// register adds a subcommand; called from init functions.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("fencegate: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// usageError marks an error as a mistake in the command line (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with a formatted message.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// parseFlags parses args with fs. --help prints every flag to stderr; a
// mistake becomes a one-line usage error that points at --help.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			printFlags(fs)
			return err
		}
		return usageError{fmt.Errorf("%w; run 'fencegate %s --help' for the flags", err, strings.TrimPrefix(fs.Name(), "fencegate "))}
	}
	fs.SetOutput(stderr)
	return nil
}

// hiddenFlag is the value of a flag that printFlags leaves out: one that
// fencegate passes to itself, not one for its users.
type hiddenFlag struct{ flag.Value }

// hideFlag hides fs's flag name from --help; it is still accepted.
func hideFlag(fs *flag.FlagSet, name string) {
	f := fs.Lookup(name)
	f.Value = hiddenFlag{f.Value}
}

// printFlags prints the usage line and every flag of fs with its help text.
// A default is added only when the help text does not state one itself, so
// that none is printed twice.
func printFlags(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage of fencegate %s:\n", strings.TrimPrefix(fs.Name(), "fencegate "))
	fs.VisitAll(func(f *flag.Flag) {
		if _, hidden := f.Value.(hiddenFlag); hidden {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		if !strings.Contains(usage, "(default") && f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			if name == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	})
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the process exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if args[0] == "--version" || args[0] == "-version" {
		printVersion(stdout)
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "fencegate: unknown command %q; run 'fencegate --help' for the list\n", args[0])
		return 2
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, new(usageError)):
		fmt.Fprintf(stderr, "fencegate %s: %v\n", c.name, err)
		return 2
	default:
		fmt.Fprintf(stderr, "fencegate %s: %v\n", c.name, err)
		return 1
	}
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "fencegate: fencing tokens from a Raft group, enforced inside PostgreSQL;")
	fmt.Fprintln(w, "an optional wire-protocol proxy gates the sessions that reach it.")
	fmt.Fprintf(w, "Supported databases: %s (%s).\n", pgfence.SupportedRange, supportedDoc)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: fencegate COMMAND [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'fencegate COMMAND --help' for the flags of a command, 'fencegate --version' for the version.")
}
