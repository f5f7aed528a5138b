package tokenservice_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// The lost-disk scenario of the issue, with each node in turn losing its
// disk: tokens up to 50 are committed by two nodes while the third (stale)
// is cut off; the first loses its data directory and is restarted with its
// usual configuration; the second stops; the stale one is reachable again.
// Before, the wiped node bootstrapped an empty log, voted the stale node
// into leadership, and the next token was 1. Now the wiped node refuses to
// start, saying it must be replaced; the stale node alone mints nothing;
// once the second node is back, tokens continue above 50; and the wiped
// node comes back through the replacement procedure, as a voter, and hands
// out tokens above everything before.
func TestLostDiskEachNode(t *testing.T) {
	t.Parallel()
	for w := range 3 {
		stale, stopped := (w+1)%3, (w+2)%3
		t.Run(fmt.Sprintf("n%d wiped, n%d stale, n%d stopped", w+1, stale+1, stopped+1), func(t *testing.T) {
			c := tokenservicetest.StartCluster(t, 3)
			c.Cut(stale)
			before := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(w), c.APIURL(stopped)}), 50)
			highest := before[len(before)-1]
			staleToken := c.Node(stale).LocalStatus().LastToken

			c.Wipe(t, w)
			if err := c.Stop(stopped); err != nil {
				t.Fatal(err)
			}
			c.Heal(stale)
			err := c.StartErr(w)
			if !errors.Is(err, raftstore.ErrMustReplace) {
				t.Fatalf("wiped %s restarted with its usual peers: Start = %v; want ErrMustReplace", c.ID(w), err)
			}
			for _, want := range []string{"empty data dir", c.ID(stale) + " holds the state of cluster", "replace it through membership"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("refusal %q does not say %q", err, want)
				}
			}
			t.Logf("wiped %s refuses to start: %v", c.ID(w), err)

			// The stale node, alone, hands out nothing.
			lone := c.ClientFor(t, []string{c.APIURL(stale)}, tokenclient.WithMaxWait(2*time.Second))
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			tok, err := lone.NextToken(ctx, "orders/42")
			cancel()
			if err == nil {
				t.Fatalf("stale %s alone handed out token %d (highest before: %d)", c.ID(stale), tok, highest)
			}
			if got := c.Node(stale).LocalStatus().LastToken; got != staleToken {
				t.Fatalf("stale %s's counter moved from %d to %d while alone", c.ID(stale), staleToken, got)
			}

			// The stopped node is back: a quorum with the full log.
			c.Restart(stopped)
			after := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(stale), c.APIURL(stopped)}), 5)
			if after[0] <= highest {
				t.Fatalf("first token after the wipe %d <= %d handed out before it", after[0], highest)
			}

			// The documented replacement brings the wiped node back.
			c.Replace(t, w)
			tok = tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(w)}, tokenclient.WithFollowLeader(false)), 1)[0]
			if tok <= after[len(after)-1] {
				t.Fatalf("token through the replaced %s %d <= %d", c.ID(w), tok, after[len(after)-1])
			}
			st := c.Node(w).LocalStatus()
			if st.ClusterID == "" || st.ClusterID != c.Node(stale).LocalStatus().ClusterID {
				t.Fatalf("replaced %s reports cluster %q, its peers %q", c.ID(w), st.ClusterID, c.Node(stale).LocalStatus().ClusterID)
			}
			// Restarted with its usual flags, it resumes from its new state.
			c.Restart(w)
			c.Leader(t)
			tokenservicetest.Mint(t, c.Client(t), 3)
		})
	}
}

// dataDirs records each node's data directory as the cluster starts it.
func dataDirs(n int) ([]string, tokenservicetest.Option) {
	dirs := make([]string, n)
	return dirs, tokenservicetest.WithConfig(func(i int, cfg *tokenservice.Config) { dirs[i] = cfg.DataDir })
}

// hasSnapshot reports whether the data directory holds a finished Raft
// snapshot.
func hasSnapshot(dir string) bool {
	ents, _ := os.ReadDir(filepath.Join(dir, "snapshots"))
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			if _, err := os.Stat(filepath.Join(dir, "snapshots", e.Name(), "meta.json")); err == nil {
				return true
			}
		}
	}
	return false
}

// mintUntil mints tokens through cl until cond holds, and returns them.
func mintUntil(t *testing.T, cl *tokenclient.Client, what string, cond func() bool) []int64 {
	t.Helper()
	var out []int64
	testutil.Eventually(t, 60*time.Second, what, func() bool {
		out = append(out, tokenservicetest.Mint(t, cl, 4)...)
		return cond()
	})
	return out
}

// Partial loss is loss. A node loses raft.db and keeps its snapshots
// while a stale node is cut off; the third then stops and the stale one
// is back. Before, the node resumed from its snapshot at term 0 as a
// voter that had forgotten its votes and every entry after the snapshot,
// voted the stale node into leadership, and tokens went backwards. Now it
// refuses to start as a lost data directory; once the third node is back
// tokens continue above everything before, and the replacement procedure
// brings the node back.
func TestLostRaftDBKeptSnapshots(t *testing.T) {
	t.Parallel()
	const w, stale, stopped = 0, 1, 2
	dirs, rec := dataDirs(3)
	c := tokenservicetest.StartCluster(t, 3, rec, tokenservicetest.WithSnapshotThreshold(16, 4),
		tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 4 }))
	cl := c.ClientFor(t, []string{c.APIURL(w), c.APIURL(stopped)})
	toks := mintUntil(t, cl, c.ID(w)+" to hold a snapshot", func() bool { return hasSnapshot(dirs[w]) })
	c.Cut(stale)
	toks = append(toks, tokenservicetest.Mint(t, cl, 50)...)
	highest := toks[len(toks)-1]

	c.Kill(w)
	if err := os.Remove(filepath.Join(dirs[w], "raft.db")); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(stopped); err != nil {
		t.Fatal(err)
	}
	c.Heal(stale)
	err := c.StartErr(w)
	if err == nil {
		// What the node did before: with the stale node it makes a quorum.
		lone := c.ClientFor(t, []string{c.APIURL(w), c.APIURL(stale)}, tokenclient.WithMaxWait(5*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tok, terr := lone.NextToken(ctx, "orders/42")
		cancel()
		t.Fatalf("%s started without raft.db (then handed out %d, %v; highest before %d)", c.ID(w), tok, terr, highest)
	}
	if !errors.Is(err, raftstore.ErrDataDirLost) {
		t.Fatalf("%s restarted without raft.db: Start = %v; want ErrDataDirLost", c.ID(w), err)
	}
	for _, want := range []string{"raft.db", "gone or empty", "replace the node through membership"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q", err, want)
		}
	}
	t.Logf("%s refuses to start: %v", c.ID(w), err)

	c.Restart(stopped)
	after := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(stale), c.APIURL(stopped)}), 5)
	if after[0] <= highest {
		t.Fatalf("first token after the loss %d <= %d handed out before it", after[0], highest)
	}
	c.Replace(t, w)
	tok := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(w)}, tokenclient.WithFollowLeader(false)), 1)[0]
	if tok <= after[len(after)-1] {
		t.Fatalf("token through the replaced %s %d <= %d", c.ID(w), tok, after[len(after)-1])
	}
	c.Restart(w)
	c.Leader(t)
	if got := tokenservicetest.Mint(t, c.Client(t), 3); got[0] <= tok {
		t.Fatalf("token after restarting the replaced %s %d <= %d", c.ID(w), got[0], tok)
	}
}

// A raft.db copied from another member (the operator "repairs" a node with
// a peer's log) is another node's state, votes included: refused.
func TestRaftDBFromPeerRefused(t *testing.T) {
	t.Parallel()
	dirs, rec := dataDirs(3)
	c := tokenservicetest.StartCluster(t, 3, rec)
	highest := tokenservicetest.Mint(t, c.Client(t), 20)[19]
	c.Kill(0)
	if err := c.Stop(1); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dirs[1], "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dirs[0], "raft.db"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	c.Restart(1)
	testutil.Eventually(t, 30*time.Second, c.ID(1)+" to follow the leader", func() bool {
		st, lt := c.Node(1).LocalStatus(), c.Node(2).LocalStatus()
		return st.LeaderID != "" && st.LeaderID == lt.LeaderID && st.Term == lt.Term
	})
	err = c.StartErr(0)
	if err == nil {
		t.Fatalf("%s started with %s's raft.db", c.ID(0), c.ID(1))
	}
	if !errors.Is(err, raftstore.ErrDataDirLost) || !errors.Is(err, raftstore.ErrForeignDataDir) {
		t.Fatalf("%s with %s's raft.db: Start = %v; want ErrDataDirLost and ErrForeignDataDir", c.ID(0), c.ID(1), err)
	}
	if !strings.Contains(err.Error(), "written by node "+c.ID(1)) {
		t.Errorf("refusal %q does not name %s", err, c.ID(1))
	}
	t.Logf("%s refuses to start: %v", c.ID(0), err)
	c.Replace(t, 0)
	if tok := tokenservicetest.Mint(t, c.Client(t), 1)[0]; tok <= highest {
		t.Fatalf("token after the replacement %d <= %d", tok, highest)
	}
}

// With real processes: node n1 of three loses raft.db and keeps its
// snapshots, and is restarted with its usual flags. It exits saying the
// directory is lost and how to replace the node; the other two keep
// handing out tokens above every token before.
func TestProcessLostRaftDBRefused(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits for a Raft snapshot, taken every 30 to 60 s by a real process")
	}
	var peers, urls []string
	raft, api := make([]string, 3), make([]string, 3)
	for i := range 3 {
		raft[i], api[i] = testutil.FreeAddr(t), testutil.FreeAddr(t)
		peers = append(peers, fmt.Sprintf("n%d=%s=http://%s", i+1, raft[i], api[i]))
		urls = append(urls, "http://"+api[i])
	}
	root := t.TempDir()
	var procs []*proc
	for i := range 3 {
		procs = append(procs, &proc{t: t, name: fmt.Sprintf("n%d", i+1), args: []string{
			"token", "serve", "--id", fmt.Sprintf("n%d", i+1), "--data-dir", filepath.Join(root, fmt.Sprintf("n%d", i+1)),
			"--raft-addr", raft[i], "--api-addr", api[i], "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--leader-lease-timeout", "150ms",
			// A log entry every 4 tokens, a snapshot every 8 entries.
			"--reserve-size", "4", "--snapshot-threshold", "8", "--trailing-logs", "4",
		}})
	}
	startAll(t, procs)
	cl, err := tokenclient.NewClient(urls, tokenclient.WithMaxWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	dir := filepath.Join(root, "n1")
	var toks []int64
	testutil.Eventually(t, 150*time.Second, "n1 to take a Raft snapshot", func() bool {
		toks = append(toks, tokenservicetest.Mint(t, cl, 8)...)
		return hasSnapshot(dir)
	})
	toks = append(toks, tokenservicetest.Mint(t, cl, 40)...)
	highest := toks[len(toks)-1]

	procs[0].kill()
	if err := os.Remove(filepath.Join(dir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	serving := procs[0].launch()
	select {
	case line, ok := <-serving:
		if ok {
			t.Fatalf("n1 serves without raft.db: %s", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("n1 neither served nor exited within 60s:\n%s", procs[0].tail())
	}
	_ = procs[0].cmd.Wait()
	procs[0].cmd = nil
	out := procs[0].tail()
	for _, want := range []string{"data dir lost its raft state", "raft.db", "fencegate token members remove n1", "--join", "Replacing a node"} {
		if !strings.Contains(out, want) {
			t.Errorf("n1's refusal does not say %q:\n%s", want, out)
		}
	}
	t.Logf("n1 refuses to start:\n%s", out)

	next := tokenservicetest.Mint(t, cl, 10)
	if next[0] <= highest {
		t.Fatalf("first token after n1's loss %d <= %d handed out before it", next[0], highest)
	}
}
