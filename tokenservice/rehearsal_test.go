package tokenservice_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/internal/netns"
	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// The three-host rehearsal: three "fencegate token serve" processes, each
// in a network namespace of its own with its own address, joined by a
// bridge, over mutual TLS with certificates naming those addresses. A
// fourth namespace is the client host. Links are cut with real packet drops
// (nftables rules inside the namespaces): the leader cut off from both
// followers, then a follower, then every node from every other. Workers
// pinned to each node take tokens throughout. Checks: no operation that
// started on a node while it was cut off from a majority succeeds before
// the cut heals, and its counter does not move (a minority never mints);
// the majority keeps minting; after each heal every node serves again;
// the whole history is linearizable and strictly increasing in real time.
// Namespaces, veths and rules are removed afterwards, also on failure.
func TestThreeHostRehearsal(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three-host rehearsal in network namespaces: not in -short")
	}
	n, err := netns.New("n1", "n2", "n3", "cl")
	if err != nil {
		t.Fatalf("set up network namespaces (the rehearsal runs as root with iproute2 and nftables; scripts/services.sh installs them): %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("remove the network: %v", err)
		}
	})
	nodes := n.Hosts()[:3]
	clientHost := n.Host("cl")

	// Certificates: one per node naming its address, one client.
	dir := t.TempDir()
	ca := newCA(t, "rehearsal")
	caFile, _, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	var peers []string
	for i, h := range nodes {
		leaf, err := ca.Issue(h.Name, []string{string(tokenapi.RolePeer)}, []string{h.IP}, pki.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := leaf.Write(dir, h.Name); err != nil {
			t.Fatal(err)
		}
		peers = append(peers, fmt.Sprintf("%s=%s:7201=https://%s:7101", nodes[i].Name, h.IP, h.IP))
	}
	var procs []*proc
	for _, h := range nodes {
		p := &proc{t: t, name: h.Name, wrap: []string{"ip", "netns", "exec", h.NS}, args: []string{
			"token", "serve", "--id", h.Name, "--data-dir", filepath.Join(dir, h.Name),
			"--raft-addr", h.IP + ":7201", "--api-addr", h.IP + ":7101", "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "500ms", "--election-timeout", "500ms", "--leader-lease-timeout", "400ms",
			"--tls-ca", caFile, "--tls-cert", filepath.Join(dir, h.Name+".pem"), "--tls-key", filepath.Join(dir, h.Name+"-key.pem"),
		}}
		procs = append(procs, p)
	}
	startAll(t, procs) // killed before the network's removal

	// Clients on the client host: one per node, pinned to it.
	dial, err := n.Dialer(clientHost)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := ca.Issue("rehearsal-client", []string{string(tokenapi.RoleClient)}, nil, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: dial, MaxIdleConnsPerHost: 16,
		TLSClientConfig: tokenclient.ClientTLSConfig(ca.Pool(), clientCert.TLSCertificate()),
	}}
	defer hc.CloseIdleConnections()
	clients := make([]*tokenclient.Client, len(nodes))
	for i, h := range nodes {
		clients[i], err = tokenclient.NewClient([]string{"https://" + h.IP + ":7101"}, tokenclient.WithHTTPClient(hc),
			tokenclient.WithFollowLeader(false), tokenclient.WithMaxWait(2*time.Second), tokenclient.WithAttemptTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer clients[i].Close()
	}
	status := func(i int) (tokenapi.Status, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return clients[i].Status(ctx)
	}

	r := &rehearsal{t: t, clients: clients, rec: history.NewRecorder(), stop: make(chan struct{})}
	r.isolated = make([]atomic.Bool, len(nodes))
	r.start(2)
	r.waitTokens(t, 0, 30, "from n1 before any cut")

	leaderOf := func() int {
		t.Helper()
		leader := -1
		testutil.WaitFor(t, 30*time.Second, "a leader agreed by a majority", func() error {
			votes := map[string]int{}
			for i := range nodes {
				if st, err := status(i); err == nil && st.LeaderID != "" {
					votes[st.LeaderID]++
				}
			}
			for i, h := range nodes {
				if votes[h.Name] >= 2 {
					leader = i
					return nil
				}
			}
			return fmt.Errorf("votes %v", votes)
		})
		return leader
	}
	others := func(i int) []*netns.Host {
		var out []*netns.Host
		for j, h := range nodes {
			if j != i {
				out = append(out, h)
			}
		}
		return out
	}

	// 1. The leader cut off from both followers.
	leader := leaderOf()
	t.Logf("cut the leader %s off from both followers", nodes[leader].Name)
	r.cut(n, nodes, leader, others(leader))
	follower := (leader + 1) % 3
	r.waitTokens(t, follower, 50, "from the majority while the leader is cut off")
	r.checkMinorityStill(t, leader, status)
	r.heal(n, nodes, leader)
	r.waitTokens(t, leader, 10, "from the old leader after the heal")

	// 2. A follower cut off.
	leader = leaderOf()
	follower = (leader + 1) % 3
	t.Logf("cut the follower %s off", nodes[follower].Name)
	r.cut(n, nodes, follower, others(follower))
	r.waitTokens(t, leader, 50, "from the leader while a follower is cut off")
	r.checkMinorityStill(t, follower, status)
	r.heal(n, nodes, follower)
	r.waitTokens(t, follower, 10, "from the follower after the heal")

	// 3. Every node cut off from every other: no majority anywhere.
	t.Log("cut every node off from every other")
	for i := range nodes {
		r.cut(n, nodes, i, others(i))
	}
	for i := range nodes {
		r.checkMinorityStill(t, i, status)
	}
	for i := range nodes {
		r.heal(n, nodes, i)
	}
	for i := range nodes {
		r.waitTokens(t, i, 10, fmt.Sprintf("from %s after healing everything", nodes[i].Name))
	}

	ops := r.finish()
	if r.violations.Load() > 0 {
		t.Errorf("%d operations started on a cut-off node succeeded before the heal", r.violations.Load())
	}
	history.Check(t, ops)
	ok := len(history.Succeeded(ops))
	t.Logf("%d operations, %d tokens, %d refused on the minority side while cut", len(ops), ok, r.refused.Load())
	for _, h := range nodes {
		if rules, err := n.Rules(h); err != nil || strings.Contains(rules, "drop") {
			t.Errorf("%s still has drop rules after the heals: %v\n%s", h.Name, err, rules)
		}
	}
}

// rehearsal drives the load of TestThreeHostRehearsal.
type rehearsal struct {
	t       *testing.T
	clients []*tokenclient.Client
	rec     *history.Recorder
	stop    chan struct{}
	wg      sync.WaitGroup

	// isolated[i] is set once node i's cut is in place and cleared before
	// its heal begins; epoch counts heals.
	isolated   []atomic.Bool
	epoch      atomic.Int64
	okPerNode  [3]atomic.Int64
	violations atomic.Int64
	refused    atomic.Int64
}

func (r *rehearsal) start(perNode int) {
	for i, cl := range r.clients {
		for w := range perNode {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				client := i*perNode + w
				for {
					select {
					case <-r.stop:
						return
					default:
					}
					cut, epoch := r.isolated[i].Load(), r.epoch.Load()
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					h := r.rec.Begin(client, fmt.Sprintf("res-%d", client%4))
					tok, err := cl.NextToken(ctx, "orders/42")
					r.rec.End(h, tok, err)
					cancel()
					switch {
					case err == nil && cut && r.epoch.Load() == epoch:
						r.violations.Add(1)
						r.t.Errorf("node %d handed out token %d to a request that started while it was cut off from a majority", i+1, tok)
					case err == nil:
						r.okPerNode[i].Add(1)
					case cut:
						r.refused.Add(1)
					}
				}
			}()
		}
	}
}

func (r *rehearsal) cut(n *netns.Net, nodes []*netns.Host, i int, peers []*netns.Host) {
	r.t.Helper()
	if err := n.Cut(nodes[i], peers...); err != nil {
		r.t.Fatal(err)
	}
	// A majority is out of reach only when at most one other node is.
	if len(peers) >= len(nodes)-1 {
		r.isolated[i].Store(true)
	}
}

func (r *rehearsal) heal(n *netns.Net, nodes []*netns.Host, i int) {
	r.t.Helper()
	r.epoch.Add(1)
	r.isolated[i].Store(false)
	if err := n.Heal(nodes[i]); err != nil {
		r.t.Fatal(err)
	}
}

// waitTokens waits until node i has handed out want more tokens.
func (r *rehearsal) waitTokens(t *testing.T, i, want int, what string) {
	t.Helper()
	target := r.okPerNode[i].Load() + int64(want)
	testutil.Eventually(t, 60*time.Second, fmt.Sprintf("%d tokens %s", want, what), func() bool {
		return r.okPerNode[i].Load() >= target
	})
}

// checkMinorityStill checks that cut-off node i's counter does not move
// while requests keep arriving at it: read once it has applied what it
// knows committed and has become a candidate, and again after it refused
// four more requests.
//
// Why wait for the candidate state: messages its peers sent before the
// cut may still sit in the node's socket buffers (the drop rules act on
// packets, not on what the kernel already delivered), and one of them can
// tell it of an entry the majority committed before the cut. The node
// becomes a candidate only after a heartbeat timeout without hearing from
// any leader or quorum, that is once such messages have been read.
func (r *rehearsal) checkMinorityStill(t *testing.T, i int, status func(int) (tokenapi.Status, error)) {
	t.Helper()
	var first tokenapi.Status
	testutil.WaitFor(t, 30*time.Second, "the cut-off node to apply what it knows committed and stand as a candidate", func() error {
		var err error
		if first, err = status(i); err != nil {
			return err
		}
		if first.State != "Candidate" {
			return fmt.Errorf("state %s", first.State)
		}
		if first.AppliedIndex < first.CommitIndex {
			return fmt.Errorf("applied %d < commit %d", first.AppliedIndex, first.CommitIndex)
		}
		return nil
	})
	before := r.refused.Load()
	testutil.Eventually(t, 30*time.Second, "requests refused by the cut-off node", func() bool { return r.refused.Load() >= before+4 })
	second, err := status(i)
	if err != nil {
		t.Fatalf("status of the cut-off node %d: %v", i+1, err)
	}
	if second.LastToken != first.LastToken || second.AppliedIndex != first.AppliedIndex {
		t.Errorf("cut-off node %d moved from last token %d (applied %d) to %d (applied %d): a minority minted",
			i+1, first.LastToken, first.AppliedIndex, second.LastToken, second.AppliedIndex)
	}
}

func (r *rehearsal) finish() []history.Op {
	close(r.stop)
	r.wg.Wait()
	return r.rec.Ops()
}
