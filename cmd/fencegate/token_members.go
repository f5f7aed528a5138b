package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

func runTokenMembers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	usage := func() {
		fmt.Fprintln(stderr, "Usage: fencegate token members list|add|remove [flags]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "  list                          members with raft and API address, suffrage, and whether each caught up")
		fmt.Fprintln(stderr, "  add ID RAFTADDR APIADDR       add a running node (empty data dir, --join) as a non-voter;")
		fmt.Fprintln(stderr, "                                the leader promotes it to voter once it has caught up")
		fmt.Fprintln(stderr, "  remove ID                     remove a member (refused if the voters left could not form a quorum)")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Run 'fencegate token members SUBCOMMAND --help' for its flags.")
	}
	if len(args) == 0 {
		usage()
		return usagef("missing subcommand; use list, add or remove")
	}
	switch args[0] {
	case "list":
		return runMembersList(ctx, args[1:], stdout, stderr)
	case "add":
		return runMembersAdd(ctx, args[1:], stdout, stderr)
	case "remove":
		return runMembersRemove(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage()
		return flag.ErrHelp
	}
	usage()
	return usagef("unknown subcommand %q; use list, add or remove", args[0])
}

// membersListOpts are the flags of 'fencegate token members list'.
type membersListOpts struct {
	*clientOpts
	json bool
}

// membersListFlags defines the flags of 'fencegate token members list'.
func membersListFlags(fs *flag.FlagSet) *membersListOpts {
	o := &membersListOpts{clientOpts: addClientFlags(fs, 10*time.Second)}
	fs.BoolVar(&o.json, "json", false, "print the list as JSON (default false: a table)")
	return o
}

func runMembersList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token members list", flag.ContinueOnError)
	o := membersListFlags(fs)
	if err := parseFlagsOnly(fs, args, stderr, "list"); err != nil {
		return err
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	ms, err := c.Members(ctx)
	if err != nil {
		return clientHint(err)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ms)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "cluster: %s  leader: %s  commit index: %d\n", orDash(ms.ClusterID), orDash(ms.LeaderID), ms.CommitIndex)
	fmt.Fprintln(tw, "ID\tRAFT\tAPI\tSUFFRAGE\tCAUGHT UP")
	for _, m := range ms.Members {
		id := m.ID
		if m.Leader {
			id += " (leader)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", id, m.RaftAddr, orDash(m.APIAddr), m.Suffrage, caughtUp(m, ms.CommitIndex))
	}
	return tw.Flush()
}

func caughtUp(m tokenapi.Member, commit uint64) string {
	switch {
	case m.CaughtUp == nil:
		return "unknown: " + m.Problem
	case *m.CaughtUp:
		return "yes"
	default:
		return fmt.Sprintf("no (applied %d of %d)", m.AppliedIndex, commit)
	}
}

// membersAddOpts are the flags of 'fencegate token members add'.
type membersAddOpts struct {
	*clientOpts
	id, raftAddr, apiAddr string
	wait                  time.Duration
}

// membersAddFlags defines the flags of 'fencegate token members add'.
func membersAddFlags(fs *flag.FlagSet) *membersAddOpts {
	o := &membersAddOpts{clientOpts: addClientFlags(fs, 30*time.Second)}
	fs.StringVar(&o.id, "id", "", "the new member's ID (or the first argument)")
	fs.StringVar(&o.raftAddr, "raft-addr", "", "the new member's Raft HOST:PORT (or the second argument)")
	fs.StringVar(&o.apiAddr, "api-addr", "", "the new member's API URL or HOST:PORT (or the third argument)")
	fs.DurationVar(&o.wait, "wait", 5*time.Minute, "how long to wait for the leader to promote the member to voter once it caught up; 0 returns once it is added as a non-voter")
	return o
}

func runMembersAdd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token members add ID RAFTADDR APIADDR", flag.ContinueOnError)
	o := membersAddFlags(fs)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	for i, dst := range []*string{&o.id, &o.raftAddr, &o.apiAddr} {
		if i < len(pos) {
			if *dst != "" {
				return usagef("argument %q repeats a flag; give ID RAFTADDR APIADDR either as arguments or as flags", pos[i])
			}
			*dst = pos[i]
		}
	}
	if len(pos) > 3 {
		return usagef("unexpected argument %q; add takes ID RAFTADDR APIADDR", pos[3])
	}
	if o.id == "" || o.raftAddr == "" || o.apiAddr == "" {
		return usagef("want ID RAFTADDR APIADDR, e.g. fencegate token members add n4 10.0.0.4:7201 http://10.0.0.4:7101")
	}
	if _, _, err := net.SplitHostPort(o.raftAddr); err != nil {
		return usagef("RAFTADDR %q is not HOST:PORT", o.raftAddr)
	}
	if _, err := tokenclient.NormalizeURL(o.apiAddr); err != nil {
		return usagef("APIADDR: %v", err)
	}
	c, err := o.client()
	if err != nil {
		return err
	}
	defer c.Close()
	actx, cancel := context.WithTimeout(ctx, o.timeout)
	m, err := c.AddMember(actx, o.id, o.raftAddr, o.apiAddr)
	cancel()
	if err != nil {
		return membersAddHint(err)
	}
	fmt.Fprintf(stdout, "%s added as a non-voter (raft %s, api %s)\n", m.ID, m.RaftAddr, m.APIAddr)
	if o.wait <= 0 {
		fmt.Fprintf(stdout, "the leader promotes %s to voter once it has caught up; watch 'fencegate token members list'\n", m.ID)
		return nil
	}
	return waitPromoted(ctx, c, m.ID, o.wait, stdout, stderr)
}

// waitPromoted waits until the leader lists id as a voter, printing how far
// it has caught up now and then.
func waitPromoted(ctx context.Context, c *tokenclient.Client, id string, wait time.Duration, stdout, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last string
	lastPrint := time.Now()
	for {
		ms, err := c.Members(ctx)
		if err == nil {
			for _, m := range ms.Members {
				if m.ID != id {
					continue
				}
				if m.Suffrage == "Voter" {
					fmt.Fprintf(stdout, "%s caught up and is a voter\n", id)
					return nil
				}
				if now := caughtUp(m, ms.CommitIndex); now != last && time.Since(lastPrint) >= 2*time.Second {
					fmt.Fprintf(stderr, "%s: catching up: %s\n", id, now)
					last, lastPrint = now, time.Now()
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s was added as a non-voter but not promoted within %v (last seen: %s); it stays a non-voter, and the leader promotes it once it catches up: check its log and 'fencegate token members list'",
				id, wait, orDash(strings.TrimSpace(last)))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// membersRemoveFlags defines the flags of 'fencegate token members remove'.
func membersRemoveFlags(fs *flag.FlagSet) *clientOpts { return addClientFlags(fs, 30*time.Second) }

func runMembersRemove(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fencegate token members remove ID", flag.ContinueOnError)
	o := membersRemoveFlags(fs)
	pos, err := parseInterspersed(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 || strings.TrimSpace(pos[0]) == "" {
		return usagef("want exactly one member ID, e.g. fencegate token members remove n2")
	}
	c, ctx, done, err := o.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := c.RemoveMember(ctx, pos[0]); err != nil {
		return clientHint(err)
	}
	fmt.Fprintf(stdout, "%s removed\n", pos[0])
	return nil
}
