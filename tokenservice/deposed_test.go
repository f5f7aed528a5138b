package tokenservice_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// The paused-old-leader scenario over the API, deterministically: the old
// leader holds a reserved range and, cut off from Raft (for the others, as
// if paused), keeps believing it leads (its lease is long); the others
// elect a new leader, which hands out tokens above that range. The old
// leader is then asked directly: its confirmation round, over the
// node-to-node API, hears term T+1 from both voters, so it answers
// no_quorum and hands out nothing, and drops its range.
func TestDeposedLeaderOverAPIHandsOutNothing(t *testing.T) {
	var longLease atomic.Int32 // 1 + the index of the node with a long lease; 0: none
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithConfig(func(i int, cfg *tokenservice.Config) {
		if int(longLease.Load()) == i+1 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 30*time.Second, 30*time.Second, 30*time.Second
		}
	}))
	old := c.Leader(t)
	longLease.Store(int32(old + 1))
	c.Restart(old) // a follower now, with the long lease; it never campaigns itself
	// Leadership comes back to it only by transfer: stop the leader
	// cleanly (it hands leadership to a follower) until old leads.
	for attempt := 0; ; attempt++ {
		l := c.Leader(t)
		if l == old {
			break
		}
		if attempt == 20 {
			t.Fatalf("leadership never moved to %s", c.ID(old))
		}
		if err := c.Stop(l); err != nil {
			t.Fatal(err)
		}
		c.Restart(l)
	}
	first := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(old)}, tokenclient.WithFollowLeader(false)), 5)
	st := c.Node(old).LocalStatus()
	term := st.Term
	if st.ReadIndex == nil || st.ReadIndex.Range == nil {
		t.Fatalf("%s leads term %d without a range after handing out %v: %+v", c.ID(old), term, first, st.ReadIndex)
	}

	c.CutRaft(old)
	next := -1
	testutil.WaitFor(t, 20*time.Second, "a new leader among the others", func() error {
		for i := range 3 {
			if s := c.Node(i).LocalStatus(); i != old && s.State == "Leader" && s.Term > term && s.LeaderAPI != "" {
				next = i
				return nil
			}
		}
		return errors.New("not yet")
	})
	after := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(next)}, tokenclient.WithFollowLeader(false)), 5)
	st = c.Node(old).LocalStatus()
	if st.State != "Leader" || st.Term != term || st.ReadIndex.Range == nil || st.ReadIndex.Range.Next >= after[0] {
		t.Fatalf("%s: state %s term %d range %+v; the scenario needs it leading term %d with a range below %d",
			c.ID(old), st.State, st.Term, st.ReadIndex.Range, term, after[0])
	}
	held := *st.ReadIndex.Range

	// The old leader is asked directly, as a client that still knows it
	// as the leader would. The first request finds its range and fails
	// the round; later ones find none and cannot reserve one.
	hc := &http.Client{Timeout: 1500 * time.Millisecond}
	for i := range 3 {
		resp, err := hc.Post(c.APIURL(old)+"/v1/tokens", "application/json", strings.NewReader(`{"resource":"r"}`))
		if err != nil && i > 0 {
			continue // no answer in time: nothing handed out either
		}
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Token       int64
			Error, Code string
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || body.Token != 0 {
			t.Fatalf("deposed %s handed out %d (request %d) after %s handed out %d", c.ID(old), body.Token, i, c.ID(next), after[len(after)-1])
		}
		if i == 0 {
			if body.Code != tokenapi.CodeNoQuorum {
				t.Fatalf("deposed %s answered %d %+v; want no_quorum", c.ID(old), resp.StatusCode, body)
			}
			if !strings.Contains(body.Error, "could not confirm") || !strings.Contains(body.Error, "no token was handed out") {
				t.Fatalf("deposed %s's first answer %q: want its failed round", c.ID(old), body.Error)
			}
			t.Logf("deposed %s (term %d, holding %d..%d) answers: %s", c.ID(old), term, held.Next, held.Last, body.Error)
		}
	}
	if ri := c.Node(old).LocalStatus().ReadIndex; ri.Range != nil || ri.RoundFailures == 0 {
		t.Fatalf("after failed rounds %s holds %+v, %d failed rounds", c.ID(old), ri.Range, ri.RoundFailures)
	}
	// Healed, it learns of the new term and tokens go on above.
	c.HealRaft(old)
	last := tokenservicetest.Mint(t, c.Client(t), 3)
	if last[0] <= after[len(after)-1] {
		t.Fatalf("token after healing %d <= %d", last[0], after[len(after)-1])
	}
}
