// Package tokenservicetest starts a token service cluster inside a test
// process, for the tests of programs that take fencing tokens: real nodes
// (Raft, bbolt with fsync, the HTTP API) on 127.0.0.1 with temporary data
// directories, stopped and removed when the test ends. Every node runs on
// listeners bound to port 0 and handed to it, so no test picks a port (a
// restarted node binds its address again), and every link between two
// nodes (Raft and API forwarding alike) runs through a relay of its own, so
// a test can cut a node off with a real TCP black hole, kill it abruptly,
// restart it from its data directory, or add, remove and replace nodes.
//
// It is not a stable API, as hashicorp/raft's MakeCluster is not: it
// serves this module's tests first and may change in any release.
package tokenservicetest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// Option configures StartCluster.
type Option func(*options)

type options struct {
	configure []func(i int, cfg *tokenservice.Config)
	logger    *slog.Logger
	// tls and admin: see WithTLS (tls.go).
	tls   bool
	admin []tokenclient.ClientOption
}

// WithConfig lets the test adjust node i's Config before it starts, and
// before every restart. The defaults are tight Raft timeouts for fast
// tests: heartbeat and election 200ms, leader lease 150ms, transport and
// forwarding timeouts 2s.
func WithConfig(f func(i int, cfg *tokenservice.Config)) Option {
	return func(o *options) { o.configure = append(o.configure, f) }
}

// WithSnapshotThreshold sets SnapshotThreshold and TrailingLogs on every
// node, to force snapshots and log compaction. The default is the service's.
func WithSnapshotThreshold(threshold, trailing uint64) Option {
	return WithConfig(func(_ int, cfg *tokenservice.Config) {
		cfg.SnapshotThreshold, cfg.TrailingLogs = threshold, trailing
		cfg.SnapshotInterval = 100 * time.Millisecond
	})
}

// WithLogger sends the nodes' logs to l. The default is the test's log.
// Either way nothing is logged once the test has ended.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Cluster is a running in-process token service cluster. Nodes are named
// by their index, 0 to Len()-1.
type Cluster struct {
	t    testing.TB
	dir  string
	opts options
	log  *slog.Logger

	mu    sync.Mutex
	nodes []*node
	// links[i][j] is the relay node i dials to reach node j's Raft port;
	// apiLinks the same for the API port.
	links, apiLinks map[[2]int]*netfault.Relay
	clients         []*tokenclient.Client
}

type node struct {
	id       string
	dir      string
	raftAddr string
	apiAddr  string // HOST:PORT
	// raftLn and apiLn are the listeners bound for the node's next start,
	// nil once it took them.
	raftLn, apiLn net.Listener
	peers         []tokenapi.Peer
	join          []string // API URLs to join through; empty: found with peers
	srv           *tokenservice.Server
	cut           bool
}

// StartCluster starts n nodes of a new cluster (3 for a cluster that
// survives the loss of one node), waits until a majority agrees on a
// leader, and stops them all when the test ends. It fails the test when a
// node cannot start.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	testutil.NeedServices(t)
	// The temp dir first: its removal then runs after the nodes are stopped
	// (cleanups run last-registered first).
	c := &Cluster{t: t, dir: t.TempDir(), links: map[[2]int]*netfault.Relay{}, apiLinks: map[[2]int]*netfault.Relay{}}
	for _, o := range opts {
		o(&c.opts)
	}
	var gate atomic.Bool
	base := c.opts.logger
	if base == nil {
		base = testutil.Logger(t)
	}
	c.log = slog.New(gatedHandler{h: base.Handler(), closed: &gate})
	t.Cleanup(func() { gate.Store(true) })
	t.Cleanup(c.stopAll)

	var peers []tokenapi.Peer
	for i := range n {
		nd := c.newNode(t, i)
		c.nodes = append(c.nodes, nd)
		peers = append(peers, tokenapi.Peer{ID: nd.id, RaftAddr: nd.raftAddr, APIAddr: c.scheme() + nd.apiAddr})
	}
	for i := range n {
		c.nodes[i].peers = peers
		for j := range n {
			if i != j {
				c.addLinks(i, j)
			}
		}
	}
	// Every node waits in Start until all of them answer, as a real
	// founding does: start them all at once.
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); c.start(i) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	c.Leader(t)
	return c
}

// newNode returns node i, its listeners bound to 127.0.0.1:0.
func (c *Cluster) newNode(t testing.TB, i int) *node {
	t.Helper()
	nd := &node{id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(c.dir, fmt.Sprintf("n%d", i+1))}
	nd.raftLn, nd.apiLn = listen(t, "127.0.0.1:0"), listen(t, "127.0.0.1:0")
	nd.raftAddr, nd.apiAddr = nd.raftLn.Addr().String(), nd.apiLn.Addr().String()
	t.Cleanup(func() { closeAll(nd.raftLn, nd.apiLn) })
	return nd
}

func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// closeAll closes the listeners that are not nil (a node that took them
// closes them itself; closing twice is harmless).
func closeAll(lns ...net.Listener) {
	for _, ln := range lns {
		if ln != nil {
			ln.Close()
		}
	}
}

// takeListeners returns the listeners bound for node i's next start, or
// binds its addresses again (a restart): the port was the node's until it
// stopped; a socket still closing, or a connection that took the port as
// its local one meanwhile, may hold it for a moment, so binding is retried
// for up to 10s.
func (c *Cluster) takeListeners(i int) (raftLn, apiLn net.Listener, err error) {
	c.mu.Lock()
	nd := c.nodes[i]
	raftLn, apiLn = nd.raftLn, nd.apiLn
	nd.raftLn, nd.apiLn = nil, nil
	raftAddr, apiAddr := nd.raftAddr, nd.apiAddr
	c.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if raftLn == nil {
			raftLn, err = net.Listen("tcp", raftAddr)
		}
		if err == nil && apiLn == nil {
			apiLn, err = net.Listen("tcp", apiAddr)
		}
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				closeAll(raftLn, apiLn)
				return nil, nil, err
			}
			return raftLn, apiLn, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// addLinks creates the relays node i uses to reach node j.
func (c *Cluster) addLinks(i, j int) {
	c.t.Helper()
	r, err := netfault.NewRelay("127.0.0.1:0", c.nodes[j].raftAddr)
	if err != nil {
		c.t.Fatalf("start relay: %v", err)
	}
	a, err := netfault.NewRelay("127.0.0.1:0", c.nodes[j].apiAddr)
	if err != nil {
		c.t.Fatalf("start relay: %v", err)
	}
	if c.nodes[i].cut || c.nodes[j].cut {
		r.Cut()
		a.Cut()
	}
	c.links[[2]int{i, j}], c.apiLinks[[2]int{i, j}] = r, a
}

// dialer returns node i's Dial: addresses of other nodes go through i's relays.
func (c *Cluster) dialer(i int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.mu.Lock()
		for j, nd := range c.nodes {
			if r := c.links[[2]int{i, j}]; r != nil && addr == nd.raftAddr {
				addr = r.Addr()
				break
			}
			if r := c.apiLinks[[2]int{i, j}]; r != nil && addr == nd.apiAddr {
				addr = r.Addr()
				break
			}
		}
		c.mu.Unlock()
		return d.DialContext(ctx, network, addr)
	}
}

func (c *Cluster) config(i int) tokenservice.Config {
	nd := c.nodes[i]
	cfg := tokenservice.Config{
		Config: raftstore.Config{
			ID:                 nd.id,
			DataDir:            nd.dir,
			RaftAddr:           nd.raftAddr,
			APIAddr:            nd.apiAddr,
			Peers:              nd.peers,
			Join:               nd.join,
			Logger:             c.log.With("node", nd.id),
			Dial:               c.dialer(i),
			HeartbeatTimeout:   200 * time.Millisecond,
			ElectionTimeout:    200 * time.Millisecond,
			LeaderLeaseTimeout: 150 * time.Millisecond,
			TransportTimeout:   2 * time.Second,
		},
		ForwardTimeout: 2 * time.Second,
	}
	for _, f := range c.opts.configure {
		f(i, &cfg)
	}
	return cfg
}

// start starts node i, failing the test (from any goroutine) when it cannot.
func (c *Cluster) start(i int) {
	if err := c.StartErr(i); err != nil {
		c.t.Errorf("start %s: %v", c.nodes[i].id, err)
	}
}

// StartErr starts node i with its usual configuration (as an operator
// would restart it) and returns what Start returned: nil once it serves,
// or why it refused to start.
func (c *Cluster) StartErr(i int) error {
	cfg := c.config(i)
	var err error
	if cfg.RaftListener, cfg.APIListener, err = c.takeListeners(i); err != nil {
		return err
	}
	srv, err := tokenservice.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nodes[i].srv = srv
	c.mu.Unlock()
	return nil
}

func (c *Cluster) stopAll() {
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	relays := make([]*netfault.Relay, 0, 2*len(c.links))
	for _, r := range c.links {
		relays = append(relays, r)
	}
	for _, r := range c.apiLinks {
		relays = append(relays, r)
	}
	clients := c.clients
	c.mu.Unlock()
	for _, cl := range clients {
		cl.Close()
	}
	var wg sync.WaitGroup
	for _, nd := range nodes {
		if nd.srv != nil {
			wg.Add(1)
			go func(s *tokenservice.Server) { defer wg.Done(); s.Kill() }(nd.srv)
		}
	}
	wg.Wait()
	for _, r := range relays {
		r.Close()
	}
}

// Len returns the number of nodes, including killed ones.
func (c *Cluster) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes)
}

// Node returns node i's server, or nil while it is killed.
func (c *Cluster) Node(i int) *tokenservice.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// ID returns node i's Raft ID ("n1", ...).
func (c *Cluster) ID(i int) string { return c.nodes[i].id }

// APIURL returns node i's API base URL.
func (c *Cluster) APIURL(i int) string { return c.scheme() + c.nodes[i].apiAddr }

// APIURLs returns every node's API base URL (killed nodes included).
func (c *Cluster) APIURLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = c.scheme() + nd.apiAddr
	}
	return out
}

// Client returns a client of every node, closed when the test ends.
func (c *Cluster) Client(t testing.TB, opts ...tokenclient.ClientOption) *tokenclient.Client {
	t.Helper()
	return c.ClientFor(t, c.APIURLs(), opts...)
}

// ClientFor returns a client for the given node URLs, closed when the test ends.
func (c *Cluster) ClientFor(t testing.TB, urls []string, opts ...tokenclient.ClientOption) *tokenclient.Client {
	t.Helper()
	cl, err := tokenclient.NewClient(urls, opts...)
	if err != nil {
		t.Fatalf("new client: %v", err)
	}
	c.mu.Lock()
	c.clients = append(c.clients, cl)
	c.mu.Unlock()
	return cl
}

// Leader waits (up to 20s) until a majority of the running, connected nodes
// name the same leader, that leader knows its own API address, and returns
// the leader's index.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	leader := -1
	testutil.WaitFor(t, 20*time.Second, "a leader", func() error {
		var err error
		leader, err = c.leaderNow()
		return err
	})
	return leader
}

func (c *Cluster) leaderNow() (int, error) {
	c.mu.Lock()
	nodes := append([]*node(nil), c.nodes...)
	c.mu.Unlock()
	votes := map[string]int{}
	voters := 0
	var seen []string
	for _, nd := range nodes {
		if nd.srv == nil {
			continue
		}
		st := nd.srv.LocalStatus()
		for _, m := range st.Members {
			if m.ID == nd.id && m.Suffrage == "Voter" {
				voters = max(voters, len(st.Members))
			}
		}
		if nd.cut {
			continue
		}
		seen = append(seen, nd.id+"->"+st.LeaderID)
		if st.LeaderID != "" {
			votes[st.LeaderID]++
		}
	}
	for i, nd := range nodes {
		if nd.srv == nil || nd.cut || votes[nd.id]*2 <= voters {
			continue
		}
		st := nd.srv.LocalStatus()
		if st.State == "Leader" && st.LeaderAPI != "" {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no leader agreed on by a majority (%s)", strings.Join(seen, " "))
}

// Kill stops node i abruptly: no snapshot, no leadership transfer, as a
// crash would.
func (c *Cluster) Kill(i int) {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Kill()
	}
}

// Stop shuts node i down cleanly (Close).
func (c *Cluster) Stop(i int) error {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv == nil {
		return nil
	}
	return srv.Close()
}

// Restart starts node i again from its data directory and on its
// addresses (killing it first if it runs); it rejoins by itself.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.Kill(i)
	c.start(i)
}

// Cut cuts node i off from every other node, in both directions, Raft and
// API forwarding alike: its links become TCP black holes.
func (c *Cluster) Cut(i int) { c.setCut(i, true) }

// Heal ends Cut(i) (links to nodes that are themselves cut stay cut).
func (c *Cluster) Heal(i int) { c.setCut(i, false) }

func (c *Cluster) setCut(i int, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[i].cut = cut
	for k, r := range c.links {
		if k[0] != i && k[1] != i {
			continue
		}
		other := k[0] + k[1] - i
		a := c.apiLinks[k]
		if cut || c.nodes[other].cut {
			r.Cut()
			a.Cut()
		} else {
			r.Heal()
			a.Heal()
		}
	}
}

// ResetAPI closes every open connection between the nodes' APIs (forwarded
// requests, address publishing, the leader's questions to members); the
// nodes dial anew on their next call.
func (c *Cluster) ResetAPI() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.apiLinks {
		a.Reset()
	}
}

// DelayAPI delays every byte node i sends to node j's API (forwarded
// requests) by d; 0 ends the delay.
func (c *Cluster) DelayAPI(i, j int, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apiLinks[[2]int{i, j}].SetDelay(d)
}

// MoveAPI restarts node i on a new API address (the node then publishes
// it to the cluster itself) and returns the new URL.
func (c *Cluster) MoveAPI(t testing.TB, i int) string {
	t.Helper()
	c.Kill(i)
	apiLn := listen(t, "127.0.0.1:0")
	addr := apiLn.Addr().String()
	t.Cleanup(func() { apiLn.Close() })
	c.mu.Lock()
	c.nodes[i].apiAddr, c.nodes[i].apiLn = addr, apiLn
	for j := range c.nodes {
		if j == i {
			continue
		}
		old := c.apiLinks[[2]int{j, i}]
		a, err := netfault.NewRelay("127.0.0.1:0", addr)
		if err != nil {
			c.mu.Unlock()
			t.Fatalf("start relay: %v", err)
		}
		if c.nodes[i].cut || c.nodes[j].cut {
			a.Cut()
		}
		c.apiLinks[[2]int{j, i}] = a
		old.Close()
	}
	c.mu.Unlock()
	if err := c.StartErr(i); err != nil {
		t.Fatalf("restart %s on a new api address: %v", c.nodes[i].id, err)
	}
	return c.scheme() + addr
}

// AddNode starts a new node with an empty data directory in join mode,
// adds it through the API (as a non-voter), waits until the leader has
// promoted it to voter once it caught up, and returns its index.
func (c *Cluster) AddNode(t testing.TB) int {
	t.Helper()
	c.mu.Lock()
	i := len(c.nodes)
	nd := c.newNode(t, i)
	for j := range i {
		nd.join = append(nd.join, c.scheme()+c.nodes[j].apiAddr)
	}
	c.nodes = append(c.nodes, nd)
	for j := range i {
		c.addLinks(i, j)
		c.addLinks(j, i)
	}
	c.mu.Unlock()
	c.start(i)
	if t.Failed() {
		t.FailNow()
	}
	c.AddMember(t, i)
	return i
}

// AddMember adds node i, which runs in join mode, as a member through the
// API (with an admin identity when the cluster runs with TLS), and waits
// until the leader has promoted it to voter once it caught up.
func (c *Cluster) AddMember(t testing.TB, i int) {
	t.Helper()
	nd := c.nodes[i]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.ClientFor(t, c.others(i), c.opts.admin...)
	if _, err := cl.AddMember(ctx, nd.id, nd.raftAddr, c.scheme()+nd.apiAddr); err != nil {
		t.Fatalf("add %s: %v", nd.id, err)
	}
	c.WaitVoter(t, i)
}

// WaitVoter waits (up to 30s) until the leader lists node i as a voter.
func (c *Cluster) WaitVoter(t testing.TB, i int) {
	t.Helper()
	cl := c.ClientFor(t, c.others(i), append(c.opts.admin, tokenclient.WithMaxWait(2*time.Second))...)
	testutil.WaitFor(t, 30*time.Second, c.nodes[i].id+" promoted to voter", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		ms, err := cl.Members(ctx)
		if err != nil {
			return err
		}
		for _, m := range ms.Members {
			if m.ID == c.nodes[i].id && m.Suffrage == "Voter" {
				return nil
			}
		}
		// Each question commits a barrier entry on the leader: ask a few
		// times a second, not a hundred.
		time.Sleep(200 * time.Millisecond)
		for _, m := range ms.Members {
			if m.ID == c.nodes[i].id {
				return fmt.Errorf("%s is a %s (applied %d of %d)", m.ID, m.Suffrage, m.AppliedIndex, ms.CommitIndex)
			}
		}
		return fmt.Errorf("%s is not a member", c.nodes[i].id)
	})
}

// others returns the API URLs of every node but i.
func (c *Cluster) others(i int) []string {
	var urls []string
	for j, u := range c.APIURLs() {
		if j != i {
			urls = append(urls, u)
		}
	}
	return urls
}

// Remove removes node i from the cluster through the API and stops it.
func (c *Cluster) Remove(t testing.TB, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.ClientFor(t, c.others(i), c.opts.admin...).RemoveMember(ctx, c.nodes[i].id); err != nil {
		t.Fatalf("remove %s: %v", c.nodes[i].id, err)
	}
	c.Kill(i)
}

// Wipe kills node i and deletes its data directory: a lost disk.
func (c *Cluster) Wipe(t testing.TB, i int) {
	t.Helper()
	c.Kill(i)
	if err := os.RemoveAll(c.nodes[i].dir); err != nil {
		t.Fatal(err)
	}
}

// Replace brings node i, whose data directory was lost, back as the
// replacement procedure of docs/operations.md does: remove it from the cluster, start
// it with an empty data directory in join mode (same id and addresses),
// add it as a member, and wait until the leader has promoted it.
func (c *Cluster) Replace(t testing.TB, i int) {
	t.Helper()
	c.Kill(i)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := c.ClientFor(t, c.others(i), c.opts.admin...)
	if err := cl.RemoveMember(ctx, c.nodes[i].id); err != nil {
		t.Fatalf("remove %s: %v", c.nodes[i].id, err)
	}
	c.StartJoin(t, i)
	c.AddMember(t, i)
}

// StartJoin starts node i with an empty data directory in join mode: its
// usual id and addresses, joining through every other node's API, as the
// replacement procedure starts a node after its lost member was removed.
// It returns once the node runs Raft as a non-member (it grants no votes
// until promoted); AddMember adds it.
func (c *Cluster) StartJoin(t testing.TB, i int) {
	t.Helper()
	c.StartJoinVia(t, i, c.others(i))
}

// StartJoinVia is StartJoin joining through the API URLs join only.
func (c *Cluster) StartJoinVia(t testing.TB, i int, join []string) {
	t.Helper()
	c.Kill(i)
	if err := os.RemoveAll(c.nodes[i].dir); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[i].join = slices.Clone(join)
	c.mu.Unlock()
	if err := c.StartErr(i); err != nil {
		t.Fatalf("start %s to join: %v", c.nodes[i].id, err)
	}
}

// AdminOptions returns the client options of an admin identity: nil
// without TLS, else those given to WithTLS.
func (c *Cluster) AdminOptions() []tokenclient.ClientOption { return c.opts.admin }

// gatedHandler drops records once the test has ended, so goroutines that
// outlive a test cannot log into it.
type gatedHandler struct {
	h      slog.Handler
	closed *atomic.Bool
}

func (g gatedHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return !g.closed.Load() && g.h.Enabled(ctx, l)
}

func (g gatedHandler) Handle(ctx context.Context, r slog.Record) error {
	if g.closed.Load() {
		return nil
	}
	return g.h.Handle(ctx, r)
}

func (g gatedHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return gatedHandler{h: g.h.WithAttrs(a), closed: g.closed}
}

func (g gatedHandler) WithGroup(name string) slog.Handler {
	return gatedHandler{h: g.h.WithGroup(name), closed: g.closed}
}

// CutRaft cuts node i's Raft links only, in both directions, and leaves
// its API links as they are: the node hears nothing of a new term through
// Raft, yet answers and asks over the API. HealRaft ends it.
func (c *Cluster) CutRaft(i int) { c.setRaftCut(i, true) }

// HealRaft ends CutRaft(i) (links to nodes that are cut stay cut).
func (c *Cluster) HealRaft(i int) { c.setRaftCut(i, false) }

func (c *Cluster) setRaftCut(i int, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, r := range c.links {
		if k[0] != i && k[1] != i {
			continue
		}
		if cut || c.nodes[k[0]+k[1]-i].cut {
			r.Cut()
		} else {
			r.Heal()
		}
	}
}

// Mint gets n tokens for resource "orders/42" from cl one after another,
// failing the test on an error or on a token not above the one before, and
// returns them.
func Mint(t testing.TB, cl *tokenclient.Client, n int) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make([]int64, 0, n)
	for i := 0; i < n; i++ {
		tok, err := cl.NextToken(ctx, "orders/42")
		if err != nil {
			t.Fatalf("NextToken #%d: %v", i, err)
		}
		if len(out) > 0 && tok <= out[len(out)-1] {
			t.Fatalf("NextToken #%d = %d, not above the previous %d", i, tok, out[len(out)-1])
		}
		out = append(out, tok)
	}
	return out
}
