package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/jackc/pgx/v5"
)

// runMarksPrune is 'fencegate marks prune --db DSN --floor N': it raises
// the database's floor to N and deletes the marks at or below it
// (pgfence.Prune, in batches of their own transactions), printing how many
// went, the floor before and after and the time taken. With --older-than
// DURATION --servers URLS in place of --floor, the floor is the token
// service's counter as it was at least DURATION ago (GET /v1/floor).
func runMarksPrune(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate marks prune", flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	floorArg := fs.String("floor", "", "the new floor: marks at or below it are deleted, and every fence with a token at or below it is refused from then on (required)")
	batch := fs.Int("batch", pgfence.DefaultPruneBatch, "marks deleted per transaction; a fence on a resource being pruned waits for one batch at most")
	olderThan := fs.String("older-than", "", "instead of --floor: prune to the token service's counter as it was at least this long ago, a `DURATION` (720h) or a number of days (30d); holders older than that are refused from then on, so pick well above the longest a lock is ever held (needs --servers)")
	servers := fs.String("servers", "", "with --older-than: comma-separated API URLs of the token service's nodes")
	timeout := fs.Duration("timeout", 10*time.Second, "with --older-than: give up asking the token service after this long")
	tokenTLS := addTokenTLSFlags(fs)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q: fencegate marks prune --db DSN --floor N", pos[0])
	}
	if *batch < 1 {
		return usagef("--batch %d must be at least 1", *batch)
	}
	var floor int64
	switch {
	case *floorArg != "" && *olderThan != "":
		return usagef("give --floor N or --older-than DURATION, not both")
	case *olderThan != "":
		if *servers == "" {
			return usagef("--older-than needs --servers: the token service says what its counter was then")
		}
		age, err := tokenservice.ParseAge(*olderThan)
		if err != nil {
			return usagef("--older-than %q is not a duration of 0 or more; give e.g. 720h or 30d", *olderThan)
		}
		c, err := newClient(*servers, *timeout, tokenTLS)
		if err != nil {
			return err
		}
		tctx, cancel := context.WithTimeout(ctx, *timeout)
		a, err := c.FloorAt(tctx, age)
		cancel()
		c.Close()
		if err != nil {
			return fmt.Errorf("ask the token service for its counter %s ago: %w", *olderThan, err)
		}
		if a.Floor <= 0 {
			fmt.Fprintf(stdout, "no token is %s old yet (the token service keeps checkpoints from its first entries on): nothing to prune\n", *olderThan)
			return nil
		}
		fmt.Fprintf(stdout, "token service: the counter was %d at %s, at least %s ago\n", a.Floor, a.At.UTC().Format(time.RFC3339), *olderThan)
		floor = a.Floor
	case *floorArg != "":
		if *servers != "" {
			return usagef("--servers is used only with --older-than")
		}
		floor, err = strconv.ParseInt(*floorArg, 10, 64)
		if err != nil || floor < 0 {
			return usagef("--floor %q is not a non-negative integer token", *floorArg)
		}
	default:
		return usagef("missing --floor N or --older-than DURATION: the token at or below which marks are deleted (e.g. --floor 1000000), or how old a holder must be to be pruned (e.g. --older-than 30d --servers URLS)")
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	res, err := pruneTo(ctx, conn, floor, *batch)
	if err != nil {
		return explain(err, name)
	}
	printPrune(stdout, name, floor, res)
	return nil
}

// pruneTo prunes the marks of conn's database at or below floor; a command
// that computes a floor another way (from the token service) calls it too.
func pruneTo(ctx context.Context, conn *pgx.Conn, floor int64, batch int) (pgfence.PruneResult, error) {
	return pgfence.Prune(ctx, conn, floor, pgfence.PruneOptions{Batch: batch})
}

// printPrune prints what a prune did.
func printPrune(stdout io.Writer, name string, asked int64, res pgfence.PruneResult) {
	took := res.Took.Round(time.Millisecond)
	if asked <= res.FloorBefore {
		fmt.Fprintf(stdout, "floor of %s is already %d: --floor %d changes nothing (the floor never goes down)\n", name, res.FloorBefore, asked)
	} else {
		fmt.Fprintf(stdout, "floor of %s: %d -> %d\n", name, res.FloorBefore, res.FloorAfter)
	}
	fmt.Fprintf(stdout, "deleted %d marks at or below %d in %d batches, %s\n", res.Deleted, res.FloorAfter, res.Batches, took)
	if res.Left > 0 {
		fmt.Fprintf(stdout, "left %d marks at or below %d that running transactions held locked: the next prune deletes them (they refuse the same tokens as the floor)\n", res.Left, res.FloorAfter)
	}
}

// runMarksStats is 'fencegate marks stats --db DSN'.
func runMarksStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate marks stats", flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q: fencegate marks stats --db DSN", pos[0])
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	st, err := pgfence.Stats(ctx, conn)
	if err != nil {
		return explain(err, name)
	}
	oldest := "none"
	if st.Oldest != nil {
		oldest = st.Oldest.UTC().Format(time.RFC3339) + " (updated_at)"
	}
	fmt.Fprintf(stdout, "database:     %s\n", name)
	fmt.Fprintf(stdout, "marks:        %d\n", st.Count)
	fmt.Fprintf(stdout, "size on disk: %s (%d bytes, with indexes)\n", humanBytes(st.Bytes), st.Bytes)
	fmt.Fprintf(stdout, "floor:        %d\n", st.Floor)
	fmt.Fprintf(stdout, "oldest mark:  %s\n", oldest)
	return nil
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
