package raftstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// countingConfirmer counts the questions put to each voter.
type countingConfirmer struct {
	Confirmer
	mu    sync.Mutex
	asked map[string]int
	total atomic.Int64
}

func (c *countingConfirmer) View(ctx context.Context, v tokenapi.Peer) (View, error) {
	c.mu.Lock()
	c.asked[v.ID]++
	c.mu.Unlock()
	c.total.Add(1)
	return c.Confirmer.View(ctx, v)
}

// startLinked starts three voters n1..n3 on linked nodes and returns them
// once one leads.
func startLinked(t *testing.T) (*linkedNodes, *Store) {
	ln := newLinkedNodes(t, "n1", "n2", "n3")
	var boot []tokenapi.Peer
	for _, id := range []string{"n1", "n2", "n3"} {
		boot = append(boot, tokenapi.Peer{ID: id, RaftAddr: ln.addrs[id], APIAddr: "http://" + id})
	}
	var pending []*Pending
	for _, b := range boot {
		p, err := Prepare(ln.config(b.ID, boot))
		if err != nil {
			t.Fatal(err)
		}
		ln.probe.nodes[b.APIAddr] = p
		pending = append(pending, p)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(pending))
	for i, p := range pending {
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var leader *Store
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool {
		for _, s := range ln.stores {
			if s.IsLeader() {
				leader = s
				return true
			}
		}
		return false
	})
	return ln, leader
}

// A round asks a majority first: in a healthy three-voter cluster one
// question per round, to the voter that answered first before. A voter
// that stops answering costs one round the hedge delay (the others are
// asked then, and answer), not the round timeout; the rounds after it
// ask the voter that answered. With no voter answering, rounds fail.
func TestRoundAsksAMajorityFirst(t *testing.T) {
	ln, leader := startLinked(t)
	cc := &countingConfirmer{Confirmer: ln.confirmer(leader.cfg.ID), asked: map[string]int{}}
	ri := NewReadIndex(leader, cc, ReadIndexConfig{RoundTimeout: 5 * time.Second})
	defer ri.Close()
	ctx := context.Background()
	for range 20 {
		if _, err := ri.Alloc(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	// The first round asks everyone (no round time known yet); rounds
	// that took longer than the hedge delay ask everyone too.
	if st := ri.Stats(); cc.total.Load() > int64(st.Rounds+st.Hedges+1) {
		t.Fatalf("%d questions in %d rounds with %d hedges; want one a round (%v)", cc.total.Load(), st.Rounds, st.Hedges, cc.asked)
	}
	fast := ri.fastVoter()
	ln.setAPICut(fast, true)
	h0 := ri.Stats().Hedges
	t0 := time.Now()
	if _, err := ri.Alloc(ctx, 1); err != nil {
		t.Fatalf("round with %s silent: %v", fast, err)
	}
	if took := time.Since(t0); took > 2*time.Second {
		t.Fatalf("round with %s silent took %v; the hedge should have asked the other voter long before the 5s timeout", fast, took)
	}
	if ri.Stats().Hedges <= h0 {
		t.Fatalf("hedges %d after a silent voter; want more than %d", ri.Stats().Hedges, h0)
	}
	if ri.fastVoter() == fast {
		t.Fatalf("the silent voter %s is still asked first", fast)
	}
	q0, h1 := cc.total.Load(), ri.Stats().Hedges
	for range 10 {
		if _, err := ri.Alloc(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := ri.Stats(); cc.total.Load()-q0 > 10+2*int64(st.Hedges-h1) {
		t.Fatalf("%d questions in 10 rounds after switching; want one a round", cc.total.Load()-q0)
	}
	// No other voter answers: the round fails, nothing is handed out.
	for id := range ln.stores {
		ln.setAPICut(id, id != leader.cfg.ID)
	}
	ri.timeout = 300 * time.Millisecond
	if r, err := ri.Alloc(ctx, 1); !errors.Is(err, ErrNotConfirmed) {
		t.Fatalf("round without answers = %+v, %v; want ErrNotConfirmed", r, err)
	}
}

// fastVoter is the voter a round asks first.
func (ri *ReadIndex) fastVoter() string {
	ri.pmu.Lock()
	defer ri.pmu.Unlock()
	return ri.fast
}
