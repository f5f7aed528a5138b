package tokenservice_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Must show 5: snapshots compact the log; a restarted node restores from its
// snapshot; a fourth node joins from a snapshot; a node is removed; join and
// remove are idempotent.
func TestSnapshotCompactionJoinRemove(t *testing.T) {
	t.Parallel()
	// One reservation per token on the read-index path, so that 200
	// tokens make enough entries to snapshot.
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithSnapshotThreshold(64, 16),
		tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 1 }))
	cl := c.Client(t)
	toks := tokenservicetest.Mint(t, cl, 200)
	last := toks[len(toks)-1]

	// Every node snapshots and compacts its log.
	testutil.WaitFor(t, 30*time.Second, "snapshots and compaction on every node", func() error {
		for i := range 3 {
			st := c.Node(i).Store().Status()
			if st.LastSnapshotIndex == 0 || st.FirstLogIndex <= 1 {
				return fmt.Errorf("%s: last snapshot %d, first log index %d", c.ID(i), st.LastSnapshotIndex, st.FirstLogIndex)
			}
		}
		return nil
	})
	// A node restarted from its data dir restores its snapshot by itself:
	// restarted while cut off from the others' Raft, it has nothing else
	// to go on. (Its API stays reachable: before it starts Raft it asks its
	// peers whether they saw it hold more than it does.)
	follower := (c.Leader(t) + 1) % 3
	c.Kill(follower)
	c.CutRaft(follower)
	c.Restart(follower)
	if got := c.Node(follower).LocalStatus().LastToken; got == 0 {
		t.Fatalf("restarted %s has last token 0; want its snapshot's counter restored", c.ID(follower))
	} else {
		t.Logf("restarted %s restored last token %d from its snapshot (last minted %d)", c.ID(follower), got, last)
	}
	c.HealRaft(follower)
	testutil.WaitFor(t, 30*time.Second, "restarted node to catch up", func() error {
		if got := c.Node(follower).LocalStatus().LastToken; got < last {
			return fmt.Errorf("last token %d < %d", got, last)
		}
		return nil
	})

	// A fourth node joins; the log it needs was compacted away, so it must
	// be sent a snapshot.
	n4 := c.AddNode(t)
	testutil.WaitFor(t, 30*time.Second, "n4 to catch up from a snapshot", func() error {
		st := c.Node(n4).Store().Status()
		if st.LastToken < last || st.LastSnapshotIndex == 0 {
			return fmt.Errorf("n4: last token %d, last snapshot %d", st.LastToken, st.LastSnapshotIndex)
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Adding a voter again is refused: a member is replaced by removing it first.
	if _, err := cl.AddMember(ctx, c.ID(n4), c.Node(n4).RaftAddr(), c.APIURL(n4)); !errors.Is(err, tokenapi.ErrRefused) {
		t.Fatalf("second add of n4 = %v; want tokenapi.ErrRefused", err)
	}
	testutil.WaitFor(t, 20*time.Second, "every node to list 4 voters with API addresses", func() error {
		for i := range 4 {
			st := c.Node(i).LocalStatus()
			if len(st.Members) != 4 {
				return fmt.Errorf("%s lists %d members", c.ID(i), len(st.Members))
			}
			for _, m := range st.Members {
				if m.APIAddr == "" || m.Suffrage != "Voter" {
					return fmt.Errorf("%s lists %+v without an API address or not as a voter", c.ID(i), m)
				}
			}
		}
		return nil
	})
	// Tokens through the new node continue above everything before.
	tok := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(n4)}), 1)[0]
	if tok <= last {
		t.Fatalf("token via n4 %d <= %d", tok, last)
	}

	// Remove a follower; removing it again succeeds too.
	victim := (c.Leader(t) + 1) % 4
	c.Remove(t, victim)
	testutil.WaitFor(t, 20*time.Second, "membership of 3", func() error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		for _, m := range st.Members {
			if m.ID == c.ID(victim) {
				return errors.New(m.ID + " still a member")
			}
		}
		if len(st.Members) != 3 {
			return fmt.Errorf("%d members", len(st.Members))
		}
		return nil
	})
	if err := cl.RemoveMember(ctx, c.ID(victim)); err != nil {
		t.Fatalf("second remove: %v", err)
	}
	after := tokenservicetest.Mint(t, cl, 5)
	if after[0] <= tok {
		t.Fatalf("token after remove %d <= %d", after[0], tok)
	}
}
