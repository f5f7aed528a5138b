package tokenservice_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/raftstore"
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
	for w := range 3 {
		stale, stopped := (w+1)%3, (w+2)%3
		t.Run(fmt.Sprintf("n%d wiped, n%d stale, n%d stopped", w+1, stale+1, stopped+1), func(t *testing.T) {
			c := tokenservicetest.StartCluster(t, 3)
			c.Cut(stale)
			before := mint(t, c.ClientFor(t, []string{c.APIURL(w), c.APIURL(stopped)}), 50)
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
			lone := c.ClientFor(t, []string{c.APIURL(stale)}, tokenservice.WithMaxWait(2*time.Second))
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
			after := mint(t, c.ClientFor(t, []string{c.APIURL(stale), c.APIURL(stopped)}), 5)
			if after[0] <= highest {
				t.Fatalf("first token after the wipe %d <= %d handed out before it", after[0], highest)
			}

			// The documented replacement brings the wiped node back.
			c.Replace(t, w)
			tok = mint(t, c.ClientFor(t, []string{c.APIURL(w)}, tokenservice.WithFollowLeader(false)), 1)[0]
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
			mint(t, c.Client(t), 3)
		})
	}
}
