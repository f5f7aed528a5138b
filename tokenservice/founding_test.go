package tokenservice_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// foundingConfigs returns the configurations of n empty nodes of a new
// cluster, with tight Raft timeouts.
func foundingConfigs(t *testing.T, n int) []tokenservice.Config {
	t.Helper()
	testutil.NeedServices(t)
	dir := t.TempDir()
	var peers []tokenapi.Peer
	for i := range n {
		peers = append(peers, tokenapi.Peer{ID: fmt.Sprintf("n%d", i+1), RaftAddr: loopbackAddr(t), APIAddr: "http://" + loopbackAddr(t)})
	}
	cfgs := make([]tokenservice.Config, n)
	for i, p := range peers {
		cfgs[i] = tokenservice.Config{
			Config: raftstore.Config{
				ID:                 p.ID,
				DataDir:            filepath.Join(dir, p.ID),
				RaftAddr:           p.RaftAddr,
				APIAddr:            p.APIAddr,
				Peers:              peers,
				Logger:             testutil.Logger(t).With("node", p.ID),
				HeartbeatTimeout:   200 * time.Millisecond,
				ElectionTimeout:    200 * time.Millisecond,
				LeaderLeaseTimeout: 150 * time.Millisecond,
			},
		}
	}
	return cfgs
}

// startNodes starts the given nodes at once and returns the servers and the
// errors; servers are killed when the test ends.
func startNodes(t *testing.T, ctx context.Context, cfgs []tokenservice.Config) ([]*tokenservice.Server, []error) {
	t.Helper()
	srvs := make([]*tokenservice.Server, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Add(1)
		cfg = bound(t, cfg)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = tokenservice.Start(ctx, cfg)
		}()
	}
	wg.Wait()
	for _, s := range srvs {
		if s != nil {
			t.Cleanup(s.Kill)
		}
	}
	return srvs, errs
}

// sameCluster waits until every server reports the same, non-empty
// cluster id, and returns it.
func sameCluster(t *testing.T, srvs []*tokenservice.Server) string {
	t.Helper()
	var id string
	testutil.WaitFor(t, 20*time.Second, "one cluster id on every node", func() error {
		id = srvs[0].LocalStatus().ClusterID
		for _, s := range srvs {
			if got := s.LocalStatus().ClusterID; got == "" || got != id {
				return fmt.Errorf("%s reports cluster %q, %s %q", s.ID(), got, srvs[0].ID(), id)
			}
		}
		return nil
	})
	return id
}

func urlsOf(srvs []*tokenservice.Server) []string {
	var out []string
	for _, s := range srvs {
		out = append(out, s.APIURL())
	}
	return out
}

// Three empty nodes started at once found one cluster with one random id;
// a cluster founded again on the same addresses gets another id.
func TestFoundingAllAtOnce(t *testing.T) {
	t.Parallel()
	cfgs := foundingConfigs(t, 3)
	var ids []string
	for round := range 2 {
		if round == 1 {
			// The same ids and addresses, empty data dirs: a new cluster.
			for i := range cfgs {
				cfgs[i].DataDir = t.TempDir()
			}
		}
		srvs, errs := startNodes(t, context.Background(), cfgs)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sameCluster(t, srvs))
		cl := c0(t, srvs)
		if toks := tokenservicetest.Mint(t, cl, 3); toks[0] != 1 {
			t.Fatalf("first token of a new cluster = %d, want 1", toks[0])
		}
		cl.Close()
		for _, s := range srvs {
			s.Kill()
		}
	}
	if ids[0] == ids[1] {
		t.Fatalf("two foundings got the same cluster id %s", ids[0])
	}
	t.Logf("cluster ids: %v", ids)
}

// c0 returns a client for the servers, closed when the test ends.
func c0(t *testing.T, srvs []*tokenservice.Server) *tokenclient.Client {
	t.Helper()
	cl, err := tokenclient.NewClient(urlsOf(srvs))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// A founder that could not ask its peers until after they founded (its
// links to them were down) finds its own data directory id in their
// founding record and founds the same cluster, as a voter.
func TestFoundingSlowFounder(t *testing.T) {
	t.Parallel()
	cfgs := foundingConfigs(t, 3)
	var blocked atomic.Bool
	blocked.Store(true)
	var d net.Dialer
	cfgs[2].Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if blocked.Load() {
			return nil, errors.New("link down (test)")
		}
		return d.DialContext(ctx, network, addr)
	}
	type result struct {
		srv *tokenservice.Server
		err error
	}
	res := make([]chan result, 3)
	for i := range 3 {
		res[i] = make(chan result, 1)
		cfg := bound(t, cfgs[i])
		go func() {
			s, err := tokenservice.Start(context.Background(), cfg)
			res[i] <- result{s, err}
		}()
	}
	// n1 and n2 see n3 empty and found; n3 cannot ask them yet.
	var srvs [3]*tokenservice.Server
	for i := range 2 {
		r := <-res[i]
		if r.err != nil {
			t.Fatalf("n%d: %v", i+1, r.err)
		}
		srvs[i] = r.srv
		t.Cleanup(r.srv.Kill)
	}
	blocked.Store(false)
	r := <-res[2]
	if r.err != nil {
		t.Fatalf("n3, the slower founder: %v", r.err)
	}
	srvs[2] = r.srv
	t.Cleanup(r.srv.Kill)
	sameCluster(t, srvs[:])
	testutil.WaitFor(t, 20*time.Second, "n3 to follow the leader as a voter", func() error {
		st := srvs[2].LocalStatus()
		for _, m := range st.Members {
			if m.ID == "n3" && m.Suffrage == "Voter" && st.LeaderID != "" {
				return nil
			}
		}
		return fmt.Errorf("n3: %+v", st)
	})
	tokenservicetest.Mint(t, c0(t, srvs[2:]), 3)
}

// With a peer down, founders wait, and after the founding timeout exit
// naming the peer; with WaitForFounding they wait until it comes and found
// then.
func TestFoundingPeerDown(t *testing.T) {
	t.Parallel()
	cfgs := foundingConfigs(t, 3)
	for i := range cfgs {
		cfgs[i].FoundingTimeout = time.Second
	}
	_, errs := startNodes(t, context.Background(), cfgs[:2])
	for i, err := range errs {
		if !errors.Is(err, raftstore.ErrWaitTimeout) || !strings.Contains(err.Error(), "n3 at "+cfgs[2].APIAddr+" does not answer") {
			t.Fatalf("n%d with n3 down: %v; want ErrWaitTimeout naming n3", i+1, err)
		}
		t.Logf("n%d: %v", i+1, err)
	}
	// The same data dirs, waiting without limit this time.
	for i := range cfgs {
		cfgs[i].WaitForFounding = true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		srv *tokenservice.Server
		err error
	}
	res := make(chan result, 2)
	for i := range 2 {
		cfg := bound(t, cfgs[i])
		go func() {
			s, err := tokenservice.Start(ctx, cfg)
			res <- result{s, err}
		}()
	}
	select {
	case r := <-res:
		t.Fatalf("a founder started without its third peer: %v", r.err)
	case <-time.After(2 * time.Second):
	}
	n3, err := tokenservice.Start(ctx, bound(t, cfgs[2]))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n3.Kill)
	srvs := []*tokenservice.Server{n3}
	for range 2 {
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Cleanup(r.srv.Kill)
		srvs = append(srvs, r.srv)
	}
	sameCluster(t, srvs)
	tokenservicetest.Mint(t, c0(t, srvs), 3)
}

// An empty node whose peers hold state never founds: a new node listed in
// --peers next to a running cluster, and a wiped node whose peers were all
// down when it started and come back while it waits.
func TestFoundingPeerWithState(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	tokenservicetest.Mint(t, c.Client(t), 5)
	peers := []tokenapi.Peer{}
	for i := range 3 {
		peers = append(peers, tokenapi.Peer{ID: c.ID(i), RaftAddr: c.Node(i).RaftAddr(), APIAddr: c.APIURL(i)})
	}
	n4 := tokenapi.Peer{ID: "n4", RaftAddr: loopbackAddr(t), APIAddr: "http://" + loopbackAddr(t)}
	_, err := tokenservice.Start(context.Background(), bound(t, tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n4",
			DataDir:  t.TempDir(),
			RaftAddr: n4.RaftAddr,
			APIAddr:  n4.APIAddr,
			Peers:    append(peers, n4),
			Logger:   testutil.Logger(t).With("node", "n4"),
		},
	}))
	if !errors.Is(err, raftstore.ErrMustReplace) {
		t.Fatalf("new node listed next to a running cluster: %v; want ErrMustReplace", err)
	}

	// n1 loses its disk while n2 and n3 are down; it waits for them, and
	// refuses once they answer.
	c.Wipe(t, 0)
	c.Kill(1)
	c.Kill(2)
	done := make(chan error, 1)
	go func() { done <- c.StartErr(0) }()
	select {
	case err := <-done:
		t.Fatalf("wiped n1 decided without any peer: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	var wg sync.WaitGroup
	for i := 1; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); c.Restart(i) }()
	}
	wg.Wait()
	if err := <-done; !errors.Is(err, raftstore.ErrMustReplace) {
		t.Fatalf("wiped n1 once its peers answered: %v; want ErrMustReplace", err)
	}
}

// A data directory that holds another cluster's state is refused when its
// peers report their own cluster, before Raft starts.
func TestFoundingPeerOfAnotherCluster(t *testing.T) {
	t.Parallel()
	a := tokenservicetest.StartCluster(t, 3)
	tokenservicetest.Mint(t, a.Client(t), 3)
	sameCluster(t, []*tokenservice.Server{a.Node(0), a.Node(1), a.Node(2)})

	// Cluster B: one node, founded alone.
	raftB, apiB := loopbackAddr(t), "http://"+loopbackAddr(t)
	dirB := t.TempDir()
	b, err := tokenservice.Start(context.Background(), bound(t, tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n1",
			DataDir:  dirB,
			RaftAddr: raftB,
			APIAddr:  apiB,
			Peers:    []tokenapi.Peer{{ID: "n1", RaftAddr: raftB, APIAddr: apiB}},
			Logger:   testutil.Logger(t).With("node", "b1"),
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	idB := sameCluster(t, []*tokenservice.Server{b})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// B's data dir, started as a member of A.
	peers := []tokenapi.Peer{{ID: "n1", RaftAddr: raftB, APIAddr: apiB}}
	for i := 1; i < 3; i++ {
		peers = append(peers, tokenapi.Peer{ID: a.ID(i), RaftAddr: a.Node(i).RaftAddr(), APIAddr: a.APIURL(i)})
	}
	_, err = tokenservice.Start(context.Background(), bound(t, tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n1",
			DataDir:  dirB,
			RaftAddr: raftB,
			APIAddr:  apiB,
			Peers:    peers,
			Logger:   testutil.Logger(t).With("node", "b1"),
		},
	}))
	if !errors.Is(err, raftstore.ErrForeignDataDir) || !strings.Contains(err.Error(), idB) {
		t.Fatalf("cluster %s's data dir among cluster A's peers: %v; want ErrForeignDataDir", idB, err)
	}
	t.Log(err)
}
