package tokenservice_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Must show 1: 10,000 concurrent requests from 64 goroutines spread over all
// three nodes: all tokens distinct, and a request that started after another
// returned got a larger token.
func TestConcurrentTokensDistinctAndOrdered(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	var clients []*tokenclient.Client
	for _, u := range c.APIURLs() {
		// Pinned to its node, so followers forward to the leader.
		clients = append(clients, c.ClientFor(t, []string{u}, tokenclient.WithFollowLeader(false)))
	}
	const total, workers = 10000, 64
	ops := runCallers(t, clients, total, workers)
	history.Check(t, ops)
	st := c.Node(c.Leader(t)).LocalStatus()
	t.Logf("%d tokens in %d log entries (last token %d, last index %d)", total, st.LastIndex, st.LastToken, st.LastIndex)
}

// Must show 2: the leader is killed; a new leader is elected, and every token
// after is larger than every token before.
func TestLeaderKilled(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	cl := c.Client(t)
	before := tokenservicetest.Mint(t, cl, 20)
	old := c.Leader(t)
	killed := time.Now()
	c.Kill(old)
	next := c.Leader(t)
	t.Logf("leader %s killed; %s leads after %v", c.ID(old), c.ID(next), time.Since(killed).Round(time.Millisecond))
	if next == old {
		t.Fatalf("killed leader %s still leads", c.ID(old))
	}
	after := tokenservicetest.Mint(t, cl, 20)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("first token after failover %d <= last token before %d", after[0], before[len(before)-1])
	}
	// The killed node comes back, catches up and serves larger tokens too.
	c.Restart(old)
	last := after[len(after)-1]
	testutil.WaitFor(t, 20*time.Second, "restarted node to catch up", func() error {
		if got := c.Node(old).LocalStatus().LastToken; got < last {
			return errors.New("behind")
		}
		return nil
	})
	tok := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(old)}), 1)[0]
	if tok <= last {
		t.Fatalf("token via restarted node %d <= %d", tok, last)
	}
}

// Must show 4: a minority node cut off from the others cannot mint; after
// healing it catches up. Then the same with the leader cut off.
func TestMinorityCutOffCannotMint(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	cl := c.Client(t)
	tokenservicetest.Mint(t, cl, 10)

	for _, which := range []string{"follower", "leader"} {
		t.Run(which, func(t *testing.T) {
			leader := c.Leader(t)
			victim := leader
			if which == "follower" {
				victim = (leader + 1) % 3
			}
			frozen := c.Node(victim).LocalStatus().LastToken
			c.Cut(victim)
			// The cut-off node loses its leader (or its leadership).
			testutil.WaitFor(t, 20*time.Second, c.ID(victim)+" to notice it is cut off", func() error {
				if st := c.Node(victim).LocalStatus(); st.LeaderID != "" {
					return errors.New(c.ID(victim) + " still follows " + st.LeaderID)
				}
				return nil
			})
			frozen = max(frozen, c.Node(victim).LocalStatus().LastToken)
			// The majority goes on minting.
			newLeader := c.Leader(t)
			if newLeader == victim {
				t.Fatalf("cut-off node %s leads", c.ID(victim))
			}
			var majority []string
			for i, u := range c.APIURLs() {
				if i != victim {
					majority = append(majority, u)
				}
			}
			toks := tokenservicetest.Mint(t, c.ClientFor(t, majority), 10)
			// The cut-off node answers a clear retryable error and mints nothing.
			lone := c.ClientFor(t, []string{c.APIURL(victim)}, tokenclient.WithMaxWait(500*time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := lone.Next(ctx, "orders/42")
			cancel()
			if err == nil || !isRetryable(err) {
				t.Fatalf("Next via cut-off node = %v; want a retryable error", err)
			}
			t.Logf("cut-off node answers: %v", err)
			if got := c.Node(victim).LocalStatus().LastToken; got != frozen {
				t.Fatalf("cut-off node's last token moved from %d to %d", frozen, got)
			}
			// Healed, it catches up and serves tokens above everything before.
			c.Heal(victim)
			last := toks[len(toks)-1]
			testutil.WaitFor(t, 30*time.Second, c.ID(victim)+" to catch up", func() error {
				if st := c.Node(victim).LocalStatus(); st.LastToken < last || st.LeaderID == "" {
					return errors.New("behind")
				}
				return nil
			})
			tok := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(victim)}), 1)[0]
			if tok <= last {
				t.Fatalf("token via healed node %d <= %d", tok, last)
			}
		})
	}
}

// Must show 6: histories recorded while leaders are killed and nodes are cut
// off are linearizable under the porcupine model.
func TestLinearizableUnderFaults(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	var clients []*tokenclient.Client
	for i := range 3 {
		urls := c.APIURLs()
		// Each client lists all nodes, starting from a different one.
		urls = append(urls[i:], urls[:i]...)
		clients = append(clients, c.ClientFor(t, urls, tokenclient.WithMaxWait(20*time.Second)))
	}
	l := startLoad(clients, 8)
	l.waitProgress(t, 50, "before faults")

	leader := c.Leader(t)
	c.Kill(leader)
	l.waitProgress(t, 50, "after killing the leader")
	c.Restart(leader)

	follower := (c.Leader(t) + 1) % 3
	c.Cut(follower)
	l.waitProgress(t, 50, "with a follower cut off")
	c.Heal(follower)

	leader = c.Leader(t)
	c.Cut(leader)
	l.waitProgress(t, 50, "with the leader cut off")
	c.Heal(leader)
	l.waitProgress(t, 50, "after healing")

	ops := l.finish()
	t.Logf("%d operations, %d succeeded", len(ops), len(history.Succeeded(ops)))
	history.Check(t, ops)
}
