package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/relay"
)

func init() {
	register(&command{name: "effects", summary: "list pending and failed effects, re-queue a failed one or drop one", run: runEffects})
}

func runEffects(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "Usage: fencegate effects show --db DSN [--state pending,failed] [--limit N]")
		fmt.Fprintln(stderr, "       fencegate effects retry ID... --db DSN")
		fmt.Fprintln(stderr, "       fencegate effects drop ID... --db DSN --reason TEXT")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  show   list effects (id, resource, token, target, state, attempts, last error, age)")
		fmt.Fprintln(stderr, "  retry  put a failed effect back in the queue (or make a pending one due now), same key")
		fmt.Fprintln(stderr, "  drop   give up on a pending or failed effect; the reason, who and when stay with it")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "The DSN is a superuser's or a member of the schema's owner role.")
	}
	if len(args) == 0 {
		usage()
		return usagef("missing subcommand; use show, retry or drop")
	}
	sub := args[0]
	switch sub {
	case "show", "retry", "drop":
	case "-h", "--help", "help":
		usage()
		return flag.ErrHelp
	default:
		usage()
		return usagef("unknown subcommand %q; use show, retry or drop", sub)
	}
	fs := flag.NewFlagSet("fencegate effects "+sub, flag.ContinueOnError)
	db := fs.String("db", "", dbFlagHelp)
	var states stringList
	var limit *int
	var reason *string
	if sub == "show" {
		fs.Var(&states, "state", "the states to list: pending, failed, delivered, dropped; repeat or separate with commas (default pending,failed)")
		limit = fs.Int("limit", 1000, "list at most this many, oldest first")
	}
	if sub == "drop" {
		reason = fs.String("reason", "", "why the effect is dropped (required); kept with the effect")
	}
	pos, err := parseInterspersed(fs, args[1:], stderr)
	if err != nil {
		return err
	}
	var ids []int64
	if sub == "show" {
		if len(pos) > 0 {
			return usagef("unexpected argument %q; show takes flags only", pos[0])
		}
		for _, s := range states {
			switch s {
			case "pending", "failed", "delivered", "dropped":
			default:
				return usagef("--state %q: use pending, failed, delivered or dropped", s)
			}
		}
	} else {
		if len(pos) == 0 {
			return usagef("missing effect ID; 'fencegate effects show --db DSN' lists them")
		}
		for _, p := range pos {
			id, err := strconv.ParseInt(p, 10, 64)
			if err != nil || id <= 0 {
				return usagef("%q is not an effect ID (a positive number)", p)
			}
			ids = append(ids, id)
		}
		if sub == "drop" && strings.TrimSpace(*reason) == "" {
			return usagef("drop needs --reason TEXT: why the effect will never be sent")
		}
	}
	conn, name, err := connectDB(ctx, *db)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	switch sub {
	case "show":
		effs, err := relay.List(ctx, conn, states, *limit)
		if err != nil {
			return explainEffects(err, name)
		}
		if len(effs) == 0 {
			fmt.Fprintf(stdout, "no effects in %s in state %s\n", name, listOrDefault(states, "pending or failed"))
			return nil
		}
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tRESOURCE\tTOKEN\tTARGET\tSTATE\tATTEMPTS\tLAST ERROR\tAGE")
		for _, e := range effs {
			last := e.LastError
			if e.State == "failed" && e.Response != "" {
				last += ": " + e.Response
			}
			if len(last) > 80 {
				last = last[:77] + "..."
			}
			if last == "" {
				last = "-"
			}
			fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", e.ID, strconv.Quote(e.Resource), e.Token, e.Target, e.State, e.Attempts,
				strings.ReplaceAll(last, "\n", " "), e.Age.Round(time.Second))
		}
		return w.Flush()
	default:
		for _, id := range ids {
			var err error
			if sub == "retry" {
				err = relay.Retry(ctx, conn, id)
			} else {
				err = relay.Drop(ctx, conn, id, *reason)
			}
			if err != nil {
				return explainEffects(err, name)
			}
			verb := map[string]string{"retry": "re-queued", "drop": "dropped"}[sub]
			fmt.Fprintf(stdout, "effect %d %s in %s\n", id, verb, name)
		}
	}
	return nil
}

func listOrDefault(l []string, def string) string {
	if len(l) == 0 {
		return def
	}
	return strings.Join(l, " or ")
}

func explainEffects(err error, name string) error {
	if errors.Is(err, relay.ErrNoEffect) {
		return err
	}
	if strings.Contains(err.Error(), "permission denied") {
		return fmt.Errorf("%s: %w; connect as a superuser or a member of the schema's owner role", name, err)
	}
	if strings.Contains(err.Error(), "fencegate.effects\" does not exist") {
		return fmt.Errorf("%s has no effects table: run 'fencegate schema upgrade --db DSN' (schema version 6 or later)", name)
	}
	return fmt.Errorf("%s: %w", name, err)
}
