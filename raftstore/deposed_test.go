package raftstore

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

// linkedNodes are in-process stores whose Raft links (one netfault.Relay
// per direction and pair) and confirmation calls a test cuts one by one.
type linkedNodes struct {
	t      *testing.T
	mu     sync.Mutex
	addrs  map[string]string             // id -> raft address
	lns    map[string]net.Listener       // id -> its Raft listener
	links  map[[2]string]*netfault.Relay // from, to -> relay
	stores map[string]*Store             // id -> store, once running
	apiCut map[string]bool               // id -> its confirmation calls fail
	probe  *pendingProber
}

func newLinkedNodes(t *testing.T, ids ...string) *linkedNodes {
	testutil.NeedServices(t)
	ln := &linkedNodes{t: t, addrs: map[string]string{}, lns: map[string]net.Listener{}, links: map[[2]string]*netfault.Relay{}, stores: map[string]*Store{},
		apiCut: map[string]bool{}, probe: &pendingProber{nodes: map[string]*Pending{}}}
	for _, id := range ids {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		ln.lns[id], ln.addrs[id] = l, l.Addr().String()
	}
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			r, err := netfault.NewRelay("127.0.0.1:0", ln.addrs[b])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			ln.links[[2]string{a, b}] = r
		}
	}
	return ln
}

// config returns id's configuration: its Raft links go through the relays.
func (ln *linkedNodes) config(id string, boot []tokenapi.Peer) Config {
	cfg := fastConfig(ln.t, id, ln.t.TempDir())
	cfg.Peers, cfg.Probe = boot, ln.probe
	var d net.Dialer
	cfg.Layer = NewTCPLayer(ln.lns[id], func(ctx context.Context, network, addr string) (net.Conn, error) {
		for to, a := range ln.addrs {
			if a == addr && to != id {
				addr = ln.links[[2]string{id, to}].Addr()
			}
		}
		return d.DialContext(ctx, network, addr)
	})
	return cfg
}

// cutRaft cuts (or heals) the Raft links between a and b, both directions.
func (ln *linkedNodes) cutRaft(a, b string, cut bool) {
	for _, k := range [][2]string{{a, b}, {b, a}} {
		if cut {
			ln.links[k].Cut()
		} else {
			ln.links[k].Heal()
		}
	}
}

// confirmer is id's Confirmer: it asks the other stores directly, unless
// either side's confirmation calls are cut.
func (ln *linkedNodes) confirmer(id string) Confirmer { return linkedConfirmer{ln, id} }

type linkedConfirmer struct {
	ln   *linkedNodes
	from string
}

func (c linkedConfirmer) View(ctx context.Context, v tokenapi.Peer) (View, error) {
	c.ln.mu.Lock()
	s, cut := c.ln.stores[v.ID], c.ln.apiCut[c.from] || c.ln.apiCut[v.ID]
	c.ln.mu.Unlock()
	if cut || s == nil {
		<-ctx.Done() // a black hole: no answer until the round gives up
		return View{}, ctx.Err()
	}
	return s.View(), nil
}

func (ln *linkedNodes) setAPICut(id string, cut bool) {
	ln.mu.Lock()
	ln.apiCut[id] = cut
	ln.mu.Unlock()
}

// A deposed leader that still believes it leads hands out nothing on the
// read-index path, while hashicorp/raft's VerifyLeader passes for it.
//
// n1 leads term T with a reserved range, and a non-voter n4 follows it. n1
// is cut off from the voters n2 and n3 (for them, as if paused); they
// elect a new leader, which reserves its own range and hands out tokens.
// n1 comes back on the node-to-node API (the Raft links to the voters stay
// cut, so nothing tells it of the new term, and its long lease keeps it
// leader): VerifyLeader on n1 passes, counting n4's acknowledgement
// towards the voters' quorum; n1's confirmation rounds fail, every one, so
// the range it still holds, below the new leader's tokens, stays in
// memory.
func TestDeposedLeaderHandsOutNothing(t *testing.T) {
	ln := newLinkedNodes(t, "n1", "n2", "n3", "n4")
	var boot []tokenapi.Peer
	for _, id := range []string{"n1", "n2", "n3"} {
		boot = append(boot, tokenapi.Peer{ID: id, RaftAddr: ln.addrs[id], APIAddr: "http://" + id})
	}
	var pending []*Pending
	for _, b := range boot {
		cfg := ln.config(b.ID, boot)
		if b.ID == "n1" {
			// A long lease: cut off from the voters, n1 keeps believing
			// it leads for the whole test, as a paused leader does when
			// it resumes. It never campaigns on its own either.
			cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 30*time.Second, 30*time.Second, 30*time.Second
			cfg.TransportTimeout = 500 * time.Millisecond
		}
		p, err := Prepare(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ln.probe.nodes[b.APIAddr] = p
		pending = append(pending, p)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pending))
	for i, p := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s, err := p.Start(ctx)
			errs[i] = err
			if err == nil {
				ln.mu.Lock()
				ln.stores[boot[i].ID] = s
				ln.mu.Unlock()
				t.Cleanup(s.Kill)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	n1, n2, n3 := ln.stores["n1"], ln.stores["n2"], ln.stores["n3"]
	ctx := context.Background()

	// n2 or n3 wins the first election (n1 waits 30s); leadership moves
	// to n1.
	var first *Store
	testutil.Eventually(t, 10*time.Second, "a first leader", func() bool {
		for _, s := range []*Store{n2, n3} {
			if s.IsLeader() {
				first = s
				return true
			}
		}
		return false
	})
	if err := first.raft.LeadershipTransferToServer("n1", raft.ServerAddress(ln.addrs["n1"])).Error(); err != nil {
		t.Fatalf("leadership transfer to n1: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", n1.IsLeader)

	// A non-voter that follows n1.
	cfg4 := ln.config("n4", nil)
	cfg4.Join, cfg4.Probe = []string{"http://n1"}, storeProber{n1}
	n4, err := Open(cfg4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n4.Kill)
	if err := n1.AddNonvoter(ctx, tokenapi.Peer{ID: "n4", RaftAddr: ln.addrs["n4"], APIAddr: "http://n4"}); err != nil {
		t.Fatal(err)
	}
	ri1 := NewReadIndex(n1, ln.confirmer("n1"), ReadIndexConfig{ReserveSize: 1000, RoundTimeout: 300 * time.Millisecond})
	defer ri1.Close()
	before, err := ri1.Alloc(ctx, 1)
	if err != nil {
		t.Fatalf("n1 Alloc while it leads: %v", err)
	}
	term1, _ := n1.LeaderTerm()
	testutil.Eventually(t, 10*time.Second, "n4 to catch up", func() bool { return n4.LastToken() >= before.First })

	// n1 is cut off from the voters; n4 stays with n1 only.
	for _, v := range []string{"n2", "n3"} {
		ln.cutRaft("n1", v, true)
		ln.cutRaft("n4", v, true)
	}
	ln.setAPICut("n1", true)
	var next *Store
	testutil.Eventually(t, 10*time.Second, "n2 or n3 to lead", func() bool {
		for _, s := range []*Store{n2, n3} {
			if term, ok := s.LeaderTerm(); ok && term > term1 {
				next = s
				return true
			}
		}
		return false
	})
	riNext := NewReadIndex(next, ln.confirmer(next.ID()), ReadIndexConfig{ReserveSize: 1000})
	defer riNext.Close()
	var newest int64
	for range 5 {
		r, err := riNext.Alloc(ctx, 3)
		if err != nil {
			t.Fatalf("new leader %s Alloc: %v", next.ID(), err)
		}
		newest = r.First + 2
	}
	held := ri1.Stats().Range
	if held == nil || held.Next >= newest {
		t.Fatalf("n1 holds %+v; the test needs a range below the new leader's token %d", held, newest)
	}

	// n1 comes back on the API; its Raft links to the voters stay cut.
	ln.setAPICut("n1", false)
	if term, ok := n1.LeaderTerm(); !ok || term != term1 {
		t.Fatalf("n1 no longer believes it leads term %d (leader %v, term %d): the scenario did not happen", term1, ok, term)
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = n1.VerifyLeader(vctx)
	cancel()
	if err != nil {
		t.Fatalf("VerifyLeader on the deposed n1 = %v; the scenario expects it to pass (it counts the non-voter n4)", err)
	}
	t.Logf("VerifyLeader passed on n1, deposed in term %d by %s, which handed out tokens up to %d; n1 holds %d..%d",
		term1, next.ID(), newest, held.Next, held.Last)
	r, err := ri1.Alloc(ctx, 1)
	if err == nil {
		t.Fatalf("deposed n1 handed out %+v after %s handed out %d", r, next.ID(), newest)
	}
	if !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("deposed n1 Alloc = %v; want ErrNotConfirmed", err)
	}
	t.Logf("n1's round: %v", err)
	if st := ri1.Stats(); st.Range != nil {
		t.Fatalf("n1 still holds %+v after a failed round", st.Range)
	}
	// Later requests find no range: n1 must reserve one, which cannot
	// commit without the voters.
	for i := range 3 {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := ri1.Alloc(actx, 1)
		cancel()
		if err == nil {
			t.Fatalf("deposed n1 handed out %+v (request %d) after %s handed out %d", r, i, next.ID(), newest)
		}
	}
}
