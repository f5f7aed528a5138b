package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
)

func init() {
	register(&command{name: "reap", summary: "end sessions that hold a fence in a stalled transaction past a limit", run: runReap})
}

// runReap is 'fencegate reap --db DSN --after DURATION [--once]': it ends
// the sessions of the database whose transaction has held a fence for
// DURATION (pgfence.Reaper: only those idle that long when its role can
// see sessions' states), printing one line per session ended; it passes
// every quarter of DURATION until interrupted, or twice, DURATION apart,
// with --once.
func runReap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate reap", flag.ContinueOnError)
	db := fs.String("db", "", "the database to watch, as a libpq DSN or URL (default $DATABASE_URL); its role needs pg_signal_backend and nothing more: CREATE ROLE fencegate_reaper LOGIN; GRANT pg_signal_backend TO fencegate_reaper")
	after := fs.Duration("after", 0, "end a session whose transaction has held a fence this long, a `DURATION` (e.g. 5m): pick it above the longest fenced transaction you run, such as the lease of the locks you fence for (required)")
	once := fs.Bool("once", false, "pass twice, --after apart, and exit (for cron): a role without pg_read_all_stats can tell how long a transaction has held a fence only by seeing it more than once")
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q: fencegate reap --db DSN --after DURATION", pos[0])
	}
	if *after <= 0 {
		return usagef("missing --after DURATION: how long a transaction may hold a fence before it is ended (e.g. --after 5m)")
	}
	r := &pgfence.Reaper{Limit: *after}
	report := func(e pgfence.Reaped) {
		what := "held a fence in its transaction for at least"
		if e.Idle {
			what = "was idle in a transaction holding a fence for"
		}
		fmt.Fprintf(stdout, "ended session %d (user %s, application_name %q): it %s %s\n", e.PID, e.Role, e.Application, what, e.For.Round(time.Millisecond))
	}
	if *once {
		conn, name, err := connectDB(ctx, *db)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		for i := range 2 {
			if i > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(*after):
				}
			}
			ended, err := r.Pass(ctx, conn)
			for _, e := range ended {
				report(e)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	}
	// Fail at once on a DSN that does not work, then run until interrupted.
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	conn.Close(context.Background())
	fmt.Fprintf(stdout, "reaping fence holders of %s past %s, every %s (Ctrl-C stops)\n", name, *after, r.Period())
	r.Run(ctx,
		func(ctx context.Context) (*pgx.Conn, error) {
			c, _, err := connectDB(ctx, *db)
			return c, err
		},
		report,
		func(err error) { fmt.Fprintf(stderr, "fencegate reap: %s: %v\n", name, err) })
	return nil
}
