package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/proc"
)

// Main runs a benchmark command: run gets a context that Ctrl-C or SIGTERM
// cancels, the arguments, stdout and stderr, and Main exits with the status
// ExitCode gives for its error, printed as "NAME: ERR".
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(ExitCode(name, err, os.Stderr))
}

// Parse parses args with fs, which has f registered, and validates f. Every
// mistake is a UsageError, as is a positional argument; asking for --help
// returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, f *Flags, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected argument %q", fs.Arg(0))
	}
	if err := f.Validate(); err != nil {
		return UsageError{Err: err}
	}
	return nil
}

// Workspace is what a benchmark run keeps its files and processes in: a
// temporary directory, the Group its servers run under (logging there),
// and the Cleanup that removes both, last added first.
type Workspace struct {
	// Dir is the temporary directory.
	Dir string
	// Group supervises the server processes; Cleanup stops them all.
	Group *proc.Group
	// Cleanup holds the undo functions; main defers its Run.
	Cleanup *Cleanup
}

// NewWorkspace creates a temporary directory named after prefix and a
// process Group logging there. Running the Cleanup stops the processes and
// removes the directory, unless keep is set: then it prints "kept DIR
// (WHAT)" on stderr. If NewWorkspace fails, it has already cleaned up.
func NewWorkspace(prefix string, keep bool, what string, stderr io.Writer) (*Workspace, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	ws := &Workspace{Dir: dir, Cleanup: new(Cleanup)}
	ws.Cleanup.Add(func() {
		if keep {
			fmt.Fprintf(stderr, "kept %s (%s)\n", dir, what)
			return
		}
		os.RemoveAll(dir)
	})
	if ws.Group, err = proc.New(dir, nil); err != nil {
		ws.Cleanup.Run()
		return nil, err
	}
	ws.Cleanup.Add(func() {
		_ = ws.Group.StopAll(10 * time.Second)
		_ = ws.Group.Close()
	})
	return ws, nil
}

// WriteJSON writes v to w as indented JSON, the form of every --json report.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
