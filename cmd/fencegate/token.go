package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/tokenservice"
)

// defaultServers are the API addresses of the local development cluster.
const defaultServers = "http://127.0.0.1:7101,http://127.0.0.1:7102,http://127.0.0.1:7103"

func init() {
	register(&command{name: "token", summary: "the Raft fencing-token service: serve, next, status, certs, credential", run: runToken})
}

func runToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "Usage: fencegate token serve|next|status|certs|credential [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  serve       run one node of the token service")
		fmt.Fprintln(stderr, "  next        print a new fencing token for a resource")
		fmt.Fprintln(stderr, "  status      print the cluster's status")
		fmt.Fprintln(stderr, "  certs       make a CA and the certificates of a cluster")
		fmt.Fprintln(stderr, "  credential  make a bearer credential")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Run 'fencegate token SUBCOMMAND --help' for its flags.")
	}
	if len(args) == 0 {
		usage()
		return usagef("missing subcommand; use serve, next or status")
	}
	switch args[0] {
	case "serve":
		return runTokenServe(ctx, args[1:], stdout, stderr)
	case "next":
		return runTokenNext(ctx, args[1:], stdout, stderr)
	case "status":
		return runTokenStatus(ctx, args[1:], stdout, stderr)
	case "certs":
		return runTokenCerts(ctx, args[1:], stdout, stderr)
	case "credential":
		return runTokenCredential(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage()
		return flag.ErrHelp
	}
	usage()
	return usagef("unknown subcommand %q; use serve, next or status", args[0])
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

func runTokenServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token serve", flag.ContinueOnError)
	id := fs.String("id", "", "this node's ID, e.g. n1 (required; no default)")
	dataDir := fs.String("data-dir", "", "directory for the Raft log, snapshots and cluster identity (required; no default)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:7201", "HOST:PORT for Raft traffic between nodes")
	apiAddr := fs.String("api-addr", "127.0.0.1:7101", "HOST:PORT for the HTTP/JSON API")
	peers := fs.String("peers", "", "voters of a new cluster as ID=RAFTADDR=APIADDR,...; the same on every node; ignored when --data-dir already holds state; with TLS the API addresses are https (default empty: wait to be added with POST /v1/members)")
	heartbeat := fs.Duration("heartbeat-timeout", time.Second, "Raft heartbeat timeout")
	election := fs.Duration("election-timeout", time.Second, "Raft election timeout")
	lease := fs.Duration("leader-lease-timeout", 500*time.Millisecond, "how long a leader without a quorum keeps leading before stepping down; at most --heartbeat-timeout")
	snapThreshold := fs.Uint64("snapshot-threshold", 8192, "log entries between snapshots")
	trailing := fs.Uint64("trailing-logs", 10240, "log entries kept after a snapshot")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	tf := addTLSFlags(fs)
	via := fs.String("dial-via", "", "reach these peer addresses through others, as ADDR=VIA,... (fault injection: relays between nodes; default empty: dial peers directly)")
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q; serve takes only flags", pos[0])
	}
	if *id == "" || *dataDir == "" {
		return usagef("--id and --data-dir are required, e.g. --id n1 --data-dir /var/lib/fencegate/n1")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level %q: use debug, info, warn or error", *logLevel)
	}
	peerList, err := tokenservice.ParsePeers(*peers)
	if err != nil {
		return usagef("--peers: %v", err)
	}
	dial, err := dialVia(*via)
	if err != nil {
		return usagef("--dial-via: %v", err)
	}
	nodeTLS, creds, err := tf.node()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})).With("node", *id)
	srv, err := tokenservice.Start(ctx, tokenservice.Config{
		ID: *id, DataDir: *dataDir, RaftAddr: *raftAddr, APIAddr: *apiAddr, Peers: peerList, Logger: logger,
		HeartbeatTimeout: *heartbeat, ElectionTimeout: *election, LeaderLeaseTimeout: *lease,
		SnapshotThreshold: *snapThreshold, TrailingLogs: *trailing, Dial: dial,
		TLS: nodeTLS, Credentials: creds,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fencegate token: node %s serving api=%s raft=%s\n", *id, srv.APIURL(), srv.RaftAddr())
	<-ctx.Done()
	logger.Info("shutting down")
	return srv.Close()
}

func serversFlag(fs *flag.FlagSet) *string {
	return fs.String("servers", defaultServers, "comma-separated API URLs (or HOST:PORT) of the token service nodes")
}

// newClient returns a client of the nodes in servers with the TLS and
// credential flags tf.
func newClient(servers string, timeout time.Duration, tf *tlsFlags) (*tokenservice.Client, error) {
	opts, err := tf.clientOptions()
	if err != nil {
		return nil, err
	}
	c, err := tokenservice.NewClient(tf.servers(servers), append(opts, tokenservice.WithMaxWait(timeout))...)
	if err != nil {
		return nil, usagef("--servers: %v", err)
	}
	return c, nil
}

func runTokenNext(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token next RESOURCE", flag.ContinueOnError)
	servers := serversFlag(fs)
	tf := addTLSFlags(fs)
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long without a token")
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
	c, err := newClient(*servers, *timeout, tf)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	tok, err := c.NextToken(ctx, pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}

func runTokenStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token status", flag.ContinueOnError)
	servers := serversFlag(fs)
	tf := addTLSFlags(fs)
	asJSON := fs.Bool("json", false, "print the status as JSON (default false: a table)")
	timeout := fs.Duration("timeout", 10*time.Second, "give up after this long")
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q; status takes only flags", pos[0])
	}
	c, err := newClient(*servers, *timeout, tf)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	opts, err := tf.clientOptions()
	if err != nil {
		return err
	}
	return printStatusTable(ctx, stdout, st, tf.ca != "", opts)
}

// printStatusTable prints one row per member, asking each member for its
// own view (state, term, indexes, last token).
func printStatusTable(ctx context.Context, w io.Writer, st tokenservice.Status, overTLS bool, opts []tokenservice.ClientOption) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "leader: %s (%s)\n", orDash(st.LeaderID), orDash(st.LeaderAPI))
	fmt.Fprintln(tw, "ID\tSTATE\tSUFFRAGE\tTERM\tLAST INDEX\tAPPLIED\tLAST TOKEN\tRAFT\tAPI")
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
			}
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	return tw.Flush()
}

func memberStatus(ctx context.Context, api string, opts []tokenservice.ClientOption) (tokenservice.Status, error) {
	c, err := tokenservice.NewClient([]string{api}, append(opts, tokenservice.WithMaxWait(2*time.Second), tokenservice.WithAttemptTimeout(time.Second), tokenservice.WithFollowLeader(false))...)
	if err != nil {
		return tokenservice.Status{}, err
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
