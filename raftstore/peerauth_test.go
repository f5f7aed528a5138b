package raftstore

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

// tlsCluster is a cluster of stores over mutual TLS whose layers admit
// only current members (TLSLayerOptions.Members reads each store's
// configuration), with each node's certificate kept for the attacks.
type tlsCluster struct {
	ca     *pki.CA
	ids    []string
	addrs  map[string]string
	leaves map[string]*pki.Leaf
	layers map[string]Layer
	stores map[string]*Store
}

func newTLSCluster(t *testing.T, ids ...string) *tlsCluster {
	t.Helper()
	testutil.NeedServices(t)
	ca, err := pki.NewCA("cluster", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := &tlsCluster{ca: ca, ids: ids, addrs: map[string]string{}, leaves: map[string]*pki.Leaf{}, layers: map[string]Layer{}, stores: map[string]*Store{}}
	var boot []tokenapi.Peer
	layers := c.layers
	running := map[string]*atomic.Pointer[Store]{}
	for _, id := range ids {
		leaf, err := ca.Issue(id, []string{"peer"}, []string{"127.0.0.1"}, pki.Options{})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		st := new(atomic.Pointer[Store])
		running[id] = st
		cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}, RootCAs: ca.Pool(), ClientCAs: ca.Pool()}
		l, err := NewTLSLayer(ln, nil, cfg, TLSLayerOptions{HandshakeTimeout: 2 * time.Second, Logger: testutil.Logger(t).With("node", id),
			Members: func() ([]tokenapi.Peer, error) {
				if s := st.Load(); s != nil {
					return s.RaftMembers()
				}
				return nil, ErrNotRunning
			}})
		if err != nil {
			t.Fatal(err)
		}
		c.leaves[id], c.addrs[id], layers[id] = leaf, ln.Addr().String(), l
		boot = append(boot, tokenapi.Peer{ID: id, RaftAddr: ln.Addr().String(), APIAddr: "http://" + id})
	}
	probe := &pendingProber{nodes: map[string]*Pending{}}
	var pending []*Pending
	for _, id := range ids {
		cfg := fastConfig(t, id, t.TempDir())
		cfg.Layer, cfg.Peers, cfg.Probe = layers[id], boot, probe
		p, err := Prepare(cfg)
		if err != nil {
			t.Fatal(err)
		}
		probe.mu.Lock()
		probe.nodes["http://"+id] = p
		probe.mu.Unlock()
		pending = append(pending, p)
	}
	errs := make([]error, len(ids))
	stores := make([]*Store, len(ids))
	var wg sync.WaitGroup
	for i, p := range pending {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			stores[i], errs[i] = p.Start(ctx)
			if errs[i] == nil {
				running[ids[i]].Store(stores[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start %s: %v", ids[i], err)
		}
		c.stores[ids[i]] = stores[i]
		t.Cleanup(stores[i].Kill)
	}
	return c
}

// leader waits for a leader among the given nodes and returns its id.
func (c *tlsCluster) leader(t *testing.T, among ...string) string {
	t.Helper()
	var id string
	testutil.Eventually(t, 10*time.Second, "a leader", func() bool {
		for _, n := range among {
			if c.stores[n].IsLeader() {
				id = n
				return true
			}
		}
		return false
	})
	return id
}

// attacker speaks Raft as the original attack did: hashicorp/raft's own
// NetworkTransport over TLS, presenting leaf.
func attacker(t *testing.T, ca *pki.CA, leaf *pki.Leaf) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13}
	tr := raft.NewNetworkTransport(attackStream{Listener: ln, cfg: cfg}, 1, 3*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return tr
}

type attackStream struct {
	net.Listener
	cfg *tls.Config
}

func (a attackStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), a.cfg)
}

func rpcHeader(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// forged is one RPC an attacker sends to a node, claiming to be claim.
type forged struct {
	name  string
	claim string
	send  func(tr *raft.NetworkTransport, victim, victimAddr string, term, last uint64) error
}

// forgedRPCs are the RPCs of the attacks: each claims a far term.
func forgedRPCs(c *tlsCluster, claimLeader, self string) []forged {
	return []forged{
		{"AppendEntries in a far term", self, func(tr *raft.NetworkTransport, victim, victimAddr string, term, last uint64) error {
			req := &raft.AppendEntriesRequest{RPCHeader: rpcHeader(self, c.addrs[self]), Term: term + 100, Leader: []byte(c.addrs[self])}
			return tr.AppendEntries(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.AppendEntriesResponse{})
		}},
		{"RequestVote in a far term", self, func(tr *raft.NetworkTransport, victim, victimAddr string, term, last uint64) error {
			req := &raft.RequestVoteRequest{RPCHeader: rpcHeader(self, c.addrs[self]), Term: term + 100, Candidate: []byte(c.addrs[self]),
				LastLogIndex: last + 1000, LastLogTerm: term + 100, LeadershipTransfer: true}
			return tr.RequestVote(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.RequestVoteResponse{})
		}},
		{"InstallSnapshot of counter 0 claiming the leader", claimLeader, func(tr *raft.NetworkTransport, victim, victimAddr string, term, last uint64) error {
			snap := []byte(`{"counter":0,"api_addrs":{}}`)
			var conf raft.Configuration
			for _, id := range c.ids {
				conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(c.addrs[id])})
			}
			req := &raft.InstallSnapshotRequest{RPCHeader: rpcHeader(claimLeader, c.addrs[claimLeader]), SnapshotVersion: raft.SnapshotVersionMax,
				Term: term + 100, Leader: []byte(c.addrs[claimLeader]), LastLogIndex: last + 1000, LastLogTerm: term + 100,
				Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: last + 1000, Size: int64(len(snap))}
			return tr.InstallSnapshot(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.InstallSnapshotResponse{}, bytes.NewReader(snap))
		}},
		{"TimeoutNow claiming the leader", claimLeader, func(tr *raft.NetworkTransport, victim, victimAddr string, term, last uint64) error {
			req := &raft.TimeoutNowRequest{RPCHeader: rpcHeader(claimLeader, c.addrs[claimLeader])}
			return tr.TimeoutNow(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.TimeoutNowResponse{})
		}},
	}
}

// A node removed from the configuration keeps a certificate of the CA (no
// revocation). With it, hashicorp's own transport sends the remaining
// nodes an InstallSnapshot of counter 0 claiming the leader's ID,
// AppendEntries and RequestVote in a far term under its own ID, and a
// TimeoutNow: each connection is closed unanswered, no term moves, and
// tokens keep increasing. (Before the layer checked membership and the
// sender of each RPC, the snapshot reset the counter: token 1 came after
// 100.)
func TestRemovedNodeCannotSpeakRaft(t *testing.T) {
	c := newTLSCluster(t, "n1", "n2", "n3")
	ctx := context.Background()
	lead := c.leader(t, c.ids...)
	var removed, other string
	for _, id := range c.ids {
		switch {
		case id == lead:
		case removed == "":
			removed = id
		default:
			other = id
		}
	}
	r, err := c.stores[lead].Allocate(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	// While still a member, the node's certificate opens a connection to
	// other that its transport keeps (a vote request in the current term,
	// refused: other follows a leader). The first forged RPC to other
	// reuses it: the layer checks membership per RPC, not only per
	// connection.
	tr := attacker(t, c.ca, c.leaves[removed])
	st := c.stores[other].Status()
	vote := &raft.RequestVoteRequest{RPCHeader: rpcHeader(removed, c.addrs[removed]), Term: st.Term, Candidate: []byte(c.addrs[removed])}
	if err := tr.RequestVote(raft.ServerID(other), raft.ServerAddress(c.addrs[other]), vote, &raft.RequestVoteResponse{}); err != nil {
		t.Fatalf("vote request of member %s: %v; want an answer", removed, err)
	}
	if err := c.stores[lead].Remove(ctx, removed, map[string]bool{other: true}); err != nil {
		t.Fatal(err)
	}
	c.stores[removed].Kill()
	testutil.Eventually(t, 10*time.Second, "the removal everywhere", func() bool {
		return !c.stores[lead].IsMember(removed) && !c.stores[other].IsMember(removed)
	})
	before := r.First + int64(r.Count) - 1
	for _, victim := range []string{other, lead} {
		claim := lead
		if victim == lead {
			claim = other
		}
		for _, f := range forgedRPCs(c, claim, removed) {
			st := c.stores[victim].Status()
			if err := f.send(tr, victim, c.addrs[victim], st.Term, st.LastIndex); err == nil {
				t.Errorf("%s from removed %s to %s: answered; want the connection closed unanswered", f.name, removed, victim)
			}
		}
	}
	for _, id := range []string{lead, other} {
		if got := c.stores[id].LastToken(); got < before {
			t.Errorf("%s: counter %d after the attack, below the %d handed out before", id, got, before)
		}
	}
	lead2 := c.leader(t, lead, other)
	r2, err := c.stores[lead2].Allocate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r2.First <= before {
		t.Fatalf("token %d after the attack, not above %d", r2.First, before)
	}
	if lead2 != lead {
		t.Errorf("leadership moved from %s to %s during the attack", lead, lead2)
	}
}

// A current member's certificate speaks only for its own node: an RPC
// claiming another node's ID, or giving another member's Raft address as
// its own, is dropped; the same member speaking for itself is answered.
func TestMemberCannotSpeakForAnother(t *testing.T) {
	c := newTLSCluster(t, "n1", "n2", "n3")
	lead := c.leader(t, c.ids...)
	var victim, liar string
	for _, id := range c.ids {
		switch {
		case id == lead:
		case victim == "":
			victim = id
		default:
			liar = id
		}
	}
	tr := attacker(t, c.ca, c.leaves[liar])
	st := c.stores[victim].Status()
	for _, f := range forgedRPCs(c, lead, lead) {
		if err := f.send(tr, victim, c.addrs[victim], st.Term, st.LastIndex); err == nil {
			t.Errorf("%s sent by %s as %s to %s: answered; want the connection closed", f.name, liar, f.claim, victim)
		}
	}
	// Its own ID with the leader's address.
	req := &raft.AppendEntriesRequest{RPCHeader: rpcHeader(liar, c.addrs[lead]), Term: st.Term + 100, Leader: []byte(c.addrs[lead])}
	if err := tr.AppendEntries(raft.ServerID(victim), raft.ServerAddress(c.addrs[victim]), req, &raft.AppendEntriesResponse{}); err == nil {
		t.Errorf("AppendEntries of %s giving %s's address: answered", liar, lead)
	}
	// Every forged RPC carries term+100: a victim that believed one jumps
	// there. A term a step or two higher is an election a busy machine
	// caused (a heartbeat late under -race), not the attack's.
	if got := c.stores[victim].Status().Term; got >= st.Term+100 {
		t.Errorf("%s's term moved from %d to %d: it took a forged term", victim, st.Term, got)
	}
	// Control: the member speaking for itself, in the current term, is
	// answered (the vote is refused: the victim has a leader).
	vote := &raft.RequestVoteRequest{RPCHeader: rpcHeader(liar, c.addrs[liar]), Term: st.Term, Candidate: []byte(c.addrs[liar])}
	var resp raft.RequestVoteResponse
	if err := tr.RequestVote(raft.ServerID(victim), raft.ServerAddress(c.addrs[victim]), vote, &resp); err != nil {
		t.Fatalf("RequestVote of member %s as itself: %v; want an answer", liar, err)
	}
	if resp.Granted {
		t.Errorf("%s granted a vote in term %d while following %s", victim, st.Term, lead)
	}
}

// Dialling a member's Raft address, a node accepts only that member's
// certificate: another member's genuine certificate, which names the same
// host, cannot answer there (the address of a node gone down, taken over).
func TestDialledMemberMustBeThatMember(t *testing.T) {
	c := newTLSCluster(t, "n1", "n2", "n3")
	c.leader(t, c.ids...)
	c.stores["n2"].Kill()
	ln, err := net.Listen("tcp", c.addrs["n2"])
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := &tls.Config{Certificates: []tls.Certificate{c.leaves["n3"].TLSCertificate()}, ClientCAs: c.ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go tls.Server(conn, cfg).Handshake()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := c.layers["n1"].Dial(ctx, c.addrs["n2"])
	if err == nil {
		conn.Close()
		t.Fatal("n1 dialled n2's address and accepted n3's certificate there")
	}
	if !strings.Contains(err.Error(), `member "n2"`) {
		t.Fatalf("dial: %v; want a refusal naming member n2", err)
	}
}
