package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

func init() {
	register(&command{name: "token", summary: "the Raft fencing-token service: serve, next, status, floor, init, members, snapshot, restore, certs, credential", run: runToken})
}

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "Usage: fencegate token serve|next|status|floor|init|members|snapshot|restore|certs|credential [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  serve       run one node of the token service")
		fmt.Fprintln(stderr, "  next        print a new fencing token for a resource")
		fmt.Fprintln(stderr, "  status      print the cluster's status")
		fmt.Fprintln(stderr, "  floor       print the counter as it was at least --age ago (a floor for 'marks prune')")
		fmt.Fprintln(stderr, "  init        start every new token above a floor (--initial-token N; never lowers the counter)")
		fmt.Fprintln(stderr, "  members     list, add or remove members (add: as a non-voter, promoted once caught up)")
		fmt.Fprintln(stderr, "  snapshot    save the cluster id and counter to a file, for disaster recovery")
		fmt.Fprintln(stderr, "  restore     raise the counter to a snapshot's value plus a margin (never lowers it)")
		fmt.Fprintln(stderr, "  certs       make a CA and the certificates of a cluster")
		fmt.Fprintln(stderr, "  credential  make a bearer credential")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Run 'fencegate token SUBCOMMAND --help' for its flags.")
	}
	const subs = "serve, next, status, floor, init, members, snapshot, restore, certs or credential"
	if len(args) == 0 {
		usage()
		return usagef("missing subcommand; use %s", subs)
	}
	switch args[0] {
	case "serve":
		return runTokenServe(ctx, args[1:], stdout, stderr)
	case "next":
		return runTokenNext(ctx, args[1:], stdout, stderr)
	case "status":
		return runTokenStatus(ctx, args[1:], stdout, stderr)
	case "floor":
		return runTokenFloor(ctx, args[1:], stdout, stderr)
	case "init":
		return runTokenInit(ctx, args[1:], stdout, stderr)
	case "members":
		return runTokenMembers(ctx, args[1:], stdout, stderr)
	case "snapshot":
		return runTokenSnapshot(ctx, args[1:], stdout, stderr)
	case "restore":
		return runTokenRestore(ctx, args[1:], stdout, stderr)
	case "certs":
		return runTokenCerts(ctx, args[1:], stdout, stderr)
	case "credential":
		return runTokenCredential(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage()
		return flag.ErrHelp
	}
	usage()
	return usagef("unknown subcommand %q; use %s", args[0], subs)
}

// parseFlagsOnly parses the flags of a subcommand that takes no
// positional arguments; one is a usage error naming the subcommand.
func parseFlagsOnly(fs *flag.FlagSet, args []string, stderr io.Writer, name string) error {
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q; %s takes only flags", pos[0], name)
	}
	return nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("next RESOURCE --servers X") and returns the positionals.
func parseInterspersed(fs *flag.FlagSet, args []string, stderr io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args, stderr); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// tokenNextOpts are the flags of 'fencegate token next'.
type tokenNextOpts struct {
	*clientOpts
	proof, json bool
}

// tokenNextFlags defines the flags of 'fencegate token next'.
func tokenNextFlags(fs *flag.FlagSet) *tokenNextOpts {
	o := &tokenNextOpts{clientOpts: addClientFlags(fs, 30*time.Second)}
	fs.BoolVar(&o.proof, "proof", false, "print \"TOKEN PROOF\" on one line (PROOF is - when the service does not sign) (default false: the token alone)")
	fs.BoolVar(&o.json, "json", false, "print {\"resource\":...,\"token\":...,\"proof\":...} (default false)")
	return o
}

func runTokenNext(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token next RESOURCE", flag.ContinueOnError)
	o := tokenNextFlags(fs)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one RESOURCE argument, e.g. fencegate token next orders/42")
	}
	if strings.TrimSpace(pos[0]) == "" {
		return usagef("RESOURCE is empty; name the resource the token fences, e.g. orders/42")
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	tok, err := c.Next(ctx, pos[0])
	if err != nil {
		return err
	}
	switch {
	case o.json:
		return json.NewEncoder(stdout).Encode(struct {
			Resource string `json:"resource"`
			Token    int64  `json:"token"`
			Proof    string `json:"proof,omitempty"`
		}{tok.Resource, tok.Value, tok.Proof})
	case o.proof:
		proof := tok.Proof
		if proof == "" {
			proof = "-"
		}
		fmt.Fprintln(stdout, tok.Value, proof)
	default:
		fmt.Fprintln(stdout, tok.Value)
	}
	return nil
}

// tokenStatusOpts are the flags of 'fencegate token status'.
type tokenStatusOpts struct {
	*clientOpts
	json bool
}

// tokenStatusFlags defines the flags of 'fencegate token status'.
func tokenStatusFlags(fs *flag.FlagSet) *tokenStatusOpts {
	o := &tokenStatusOpts{clientOpts: addClientFlags(fs, 10*time.Second)}
	fs.BoolVar(&o.json, "json", false, "print the status as JSON (default false: a table)")
	return o
}

func runTokenStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token status", flag.ContinueOnError)
	o := tokenStatusFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "status"); err != nil {
		return err
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	opts, err := o.tls.clientOptions()
	if err != nil {
		return err
	}
	return printStatusTable(ctx, stdout, st, o.tls.ca != "", opts)
}

// printStatusTable prints one row per member, asking each member for its
// own view (state, term, indexes, last token).
func printStatusTable(ctx context.Context, w io.Writer, st tokenapi.Status, overTLS bool, opts []tokenclient.ClientOption) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster: %s  leader: %s (%s)\n", orDash(st.ClusterID), orDash(st.LeaderID), orDash(st.LeaderAPI))
	fmt.Fprintln(tw, "ID\tSTATE\tSUFFRAGE\tTERM\tLAST INDEX\tAPPLIED\tLAST TOKEN\tRAFT\tAPI")
	var leader *tokenapi.Status
	for _, m := range st.Members {
		row := []string{m.ID, "unreachable", m.Suffrage, "-", "-", "-", "-", m.RaftAddr, orDash(m.APIAddr)}
		if m.APIAddr != "" {
			api := m.APIAddr
			if overTLS {
				// A cluster that ran without TLS may still record http.
				api = strings.Replace(api, "http://", "https://", 1)
			}
			if ms, err := memberStatus(ctx, api, opts); err == nil {
				row[1] = ms.State
				row[3] = fmt.Sprint(ms.Term)
				row[4] = fmt.Sprint(ms.LastIndex)
				row[5] = fmt.Sprint(ms.AppliedIndex)
				row[6] = fmt.Sprint(ms.LastToken)
				if ms.State == "Leader" {
					leader = &ms
				}
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if leader != nil {
		_, err := fmt.Fprintln(w, readIndexLine(leader.ReadIndex))
		return err
	}
	return nil
}

// readIndexLine says how the leader hands out tokens: the reserved range in
// use and the confirmation rounds per second, or commit per batch.
func readIndexLine(ri *tokenapi.ReadIndexStatus) string {
	if ri == nil {
		return "tokens: one commit per batch (--commit-per-batch)"
	}
	rng := "none held (reserved at the next request)"
	if r := ri.Range; r != nil {
		rng = fmt.Sprintf("%d..%d (%d left; reserved by entry %d in term %d)", r.Next, r.Last, r.Last-r.Next+1, r.Index, r.Term)
	}
	return fmt.Sprintf("tokens: read-index; range in use %s; %.1f rounds/s (%d rounds, %d failed, %d reservations)",
		rng, ri.RoundsPerSecond, ri.Rounds, ri.RoundFailures, ri.Reservations)
}

func memberStatus(ctx context.Context, api string, opts []tokenclient.ClientOption) (tokenapi.Status, error) {
	c, err := tokenclient.NewClient([]string{api}, append(opts, tokenclient.WithMaxWait(2*time.Second), tokenclient.WithAttemptTimeout(time.Second), tokenclient.WithFollowLeader(false))...)
	if err != nil {
		return tokenapi.Status{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return st, err
	}
	if st.ID == "" {
		return st, errors.New("empty status")
	}
	return st, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
