package tokenservice_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// raftAttacker speaks Raft to the nodes of a cluster as the original attack
// did: hashicorp/raft's own NetworkTransport, over TLS, presenting leaf and
// verifying the nodes against the CA.
func raftAttacker(t *testing.T, ca *pki.CA, leaf *pki.Leaf) *raft.NetworkTransport {
	t.Helper()
	cert := leaf.TLSCertificate()
	dial := func(addr string) (net.Conn, error) {
		cfg := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
		return tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &dialOnly{dial: dial, closed: make(chan struct{})}, MaxPool: 1, Timeout: 3 * time.Second, Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() { tr.Close() })
	return tr
}

func header(id, addr string) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte(addr)}
}

// raftAttack is one forged RPC, sent to the node at victimAddr in a term
// far ahead of term: the sender claims to be claim, at claimAddr.
type raftAttack struct {
	name string
	send func(tr *raft.NetworkTransport, victim, victimAddr, claim, claimAddr string, term, last uint64) error
}

var raftAttacks = []raftAttack{
	{"InstallSnapshot of counter 0", func(tr *raft.NetworkTransport, victim, victimAddr, claim, claimAddr string, term, last uint64) error {
		snap := []byte(`{"counter":0,"api_addrs":{}}`)
		conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(claim), Address: raft.ServerAddress(claimAddr)},
			{Suffrage: raft.Voter, ID: raft.ServerID(victim), Address: raft.ServerAddress(victimAddr)}}}
		req := &raft.InstallSnapshotRequest{RPCHeader: header(claim, claimAddr), SnapshotVersion: raft.SnapshotVersionMax,
			Term: term + 100, Leader: []byte(claimAddr), LastLogIndex: last + 1000, LastLogTerm: term + 100,
			Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: last + 1000, Size: int64(len(snap))}
		return tr.InstallSnapshot(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.InstallSnapshotResponse{}, bytes.NewReader(snap))
	}},
	{"AppendEntries", func(tr *raft.NetworkTransport, victim, victimAddr, claim, claimAddr string, term, last uint64) error {
		req := &raft.AppendEntriesRequest{RPCHeader: header(claim, claimAddr), Term: term + 100, Leader: []byte(claimAddr)}
		return tr.AppendEntries(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.AppendEntriesResponse{})
	}},
	{"RequestVote", func(tr *raft.NetworkTransport, victim, victimAddr, claim, claimAddr string, term, last uint64) error {
		req := &raft.RequestVoteRequest{RPCHeader: header(claim, claimAddr), Term: term + 100, Candidate: []byte(claimAddr),
			LastLogIndex: last + 1000, LastLogTerm: term + 100, LeadershipTransfer: true}
		return tr.RequestVote(raft.ServerID(victim), raft.ServerAddress(victimAddr), req, &raft.RequestVoteResponse{})
	}},
}

// peerCall calls path on the node at base with a client presenting leaf,
// which trusts ca, and returns the HTTP status, or the error of a call the
// node refused in the handshake.
func peerCall(t *testing.T, ca *pki.CA, leaf *pki.Leaf, method, base, path, body string) (int, error) {
	t.Helper()
	cfg := tokenclient.ClientTLSConfig(ca.Pool(), leaf.TLSCertificate())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func issuePeer(t *testing.T, ca *pki.CA, id string, o pki.Options) *pki.Leaf {
	t.Helper()
	leaf, err := ca.Issue(id, []string{string(tokenapi.RolePeer)}, []string{"127.0.0.1"}, o)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// startNamedCluster starts three TLS nodes whose certificates, and the
// admin client's, name the cluster o.Cluster.
func startNamedCluster(t *testing.T, ca *pki.CA, o pki.Options) *tokenservicetest.Cluster {
	t.Helper()
	node := func(id string) *tokenservice.NodeTLS {
		return &tokenservice.NodeTLS{CA: ca.Pool(), Cert: issuePeer(t, ca, id, o).TLSCertificate()}
	}
	admin, err := ca.Issue("ops", []string{string(tokenapi.RoleAdmin)}, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	return tokenservicetest.StartCluster(t, 3, tokenservicetest.WithTLS(node, nil,
		tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool(), admin.TLSCertificate()))))
}

// Must show: a node removed from the cluster is a stranger, although its
// peer certificate stays valid (no revocation; 825 days). With a peer
// certificate of the removed node, hashicorp's own transport sends each
// remaining node an InstallSnapshot of counter 0 claiming the leader's ID
// (the attack that once made the cluster hand out token 1 after 100),
// AppendEntries and RequestVote in a far term under its own ID: each
// connection is closed unanswered, no term moves and tokens keep
// increasing. On the API its certificate no longer holds the peer role:
// the confirmation-round and allocation routes answer 403.
func TestRemovedNodeIsAStranger(t *testing.T) {
	ca := newCA(t, "cluster")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil))
	app := c.Client(t, tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)...)
	before := tokenservicetest.Mint(t, app, 100)

	leader := c.Leader(t)
	removed, other := (leader+1)%3, (leader+2)%3
	removedID, removedAddr := c.ID(removed), c.Node(removed).RaftAddr()
	c.Remove(t, removed)
	stolen := issuePeer(t, ca, removedID, pki.Options{}) // what the decommissioned host still holds
	tr := raftAttacker(t, ca, stolen)

	terms := map[int]uint64{}
	for _, victim := range []int{leader, other} {
		claim := leader
		if victim == leader {
			claim = other
		}
		st := c.Node(victim).LocalStatus()
		terms[victim] = st.Term
		for _, a := range raftAttacks {
			claimID, claimAddr := removedID, removedAddr
			if a.name == "InstallSnapshot of counter 0" {
				claimID, claimAddr = c.ID(claim), c.Node(claim).RaftAddr()
			}
			if err := a.send(tr, c.ID(victim), c.Node(victim).RaftAddr(), claimID, claimAddr, st.Term, st.LastIndex); err == nil {
				t.Errorf("%s from removed %s as %s to %s: answered; want the connection closed unanswered", a.name, removedID, claimID, c.ID(victim))
			}
		}
	}
	for _, path := range []struct{ method, path, body string }{
		{"GET", "/v1/internal/view", ""},
		{"GET", "/v1/internal/view-stream", ""},
		{"POST", "/v1/internal/allocate", `{"count":1000000}`},
		{"PUT", "/v1/members/" + removedID + "/api-addr", `{"api_addr":"https://127.0.0.1:1"}`},
	} {
		for _, victim := range []int{leader, other} {
			code, err := peerCall(t, ca, stolen, path.method, c.APIURL(victim), path.path, path.body)
			if err == nil && code != http.StatusForbidden {
				t.Errorf("%s %s on %s with removed %s's certificate: %d; want 403", path.method, path.path, c.ID(victim), removedID, code)
			}
		}
	}
	for _, i := range []int{leader, other} {
		if got := c.Node(i).LocalStatus().Term; got != terms[i] {
			t.Errorf("%s's term moved from %d to %d during the attack", c.ID(i), terms[i], got)
		}
	}
	after := tokenservicetest.Mint(t, app, 20)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("token %d after the attack, not above %d handed out before it", after[0], before[len(before)-1])
	}
}

// Must show: a current member's certificate speaks for its own node only.
// A follower's certificate sends the other follower Raft RPCs claiming the
// leader's ID: each is dropped and no term moves. The same certificate
// speaking for itself in the current term is answered.
func TestMemberCertificateSpeaksOnlyForItself(t *testing.T) {
	ca := newCA(t, "cluster")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil))
	leader := c.Leader(t)
	victim, liar := (leader+1)%3, (leader+2)%3
	tr := raftAttacker(t, ca, issuePeer(t, ca, c.ID(liar), pki.Options{}))
	st := c.Node(victim).LocalStatus()
	for _, a := range raftAttacks {
		if err := a.send(tr, c.ID(victim), c.Node(victim).RaftAddr(), c.ID(leader), c.Node(leader).RaftAddr(), st.Term, st.LastIndex); err == nil {
			t.Errorf("%s by %s claiming leader %s: answered; want the connection closed", a.name, c.ID(liar), c.ID(leader))
		}
	}
	if got := c.Node(victim).LocalStatus().Term; got != st.Term {
		t.Errorf("%s's term moved from %d to %d", c.ID(victim), st.Term, got)
	}
	// Control: speaking for itself, in the current term (the vote is
	// refused: the victim follows a leader).
	vote := &raft.RequestVoteRequest{RPCHeader: header(c.ID(liar), c.Node(liar).RaftAddr()), Term: st.Term, Candidate: []byte(c.Node(liar).RaftAddr())}
	var resp raft.RequestVoteResponse
	if err := tr.RequestVote(raft.ServerID(c.ID(victim)), raft.ServerAddress(c.Node(victim).RaftAddr()), vote, &resp); err != nil {
		t.Fatalf("RequestVote of member %s as itself: %v; want an answer", c.ID(liar), err)
	}
}

// Must show: certificates name their cluster, and a node refuses peers of
// another cluster signed by the same CA (a staging cluster sharing
// production's CA), and peers whose certificates name no cluster (made
// before certificates named one), on the Raft port and on the API; a
// client certificate of another cluster is refused too, while one that
// names no cluster still works (clients keep working while a cluster moves
// to named certificates).
func TestPeerOfAnotherClusterRefused(t *testing.T) {
	ca := newCA(t, "shared")
	prod := pki.Options{Cluster: "prod"}
	c := startNamedCluster(t, ca, prod)
	leader := c.Leader(t)
	follower, member := (leader+1)%3, (leader+2)%3
	st := c.Node(follower).LocalStatus()

	for _, tc := range []struct {
		name string
		o    pki.Options
	}{
		{"a peer of cluster staging", pki.Options{Cluster: "staging"}},
		{"a peer of no cluster", pki.Options{}},
	} {
		// A member's own ID, speaking for itself: only the cluster differs.
		leaf := issuePeer(t, ca, c.ID(member), tc.o)
		tr := raftAttacker(t, ca, leaf)
		for _, a := range raftAttacks {
			if err := a.send(tr, c.ID(follower), c.Node(follower).RaftAddr(), c.ID(member), c.Node(member).RaftAddr(), st.Term, st.LastIndex); err == nil {
				t.Errorf("%s to %s with %s: answered; want refused", a.name, c.ID(follower), tc.name)
			}
		}
		if code, err := peerCall(t, ca, leaf, "GET", c.APIURL(follower), "/v1/internal/view", ""); err == nil && code != http.StatusForbidden {
			t.Errorf("GET /v1/internal/view with %s: %d; want refused", tc.name, code)
		}
	}
	if got := c.Node(follower).LocalStatus().Term; got != st.Term {
		t.Errorf("%s's term moved from %d to %d", c.ID(follower), st.Term, got)
	}
	// Control: the member's certificate of this cluster is answered.
	if code, err := peerCall(t, ca, issuePeer(t, ca, c.ID(member), prod), "GET", c.APIURL(follower), "/v1/internal/view", ""); err != nil || code != http.StatusOK {
		t.Fatalf("GET /v1/internal/view with %s's certificate of cluster prod: %d, %v; want 200", c.ID(member), code, err)
	}

	for _, tc := range []struct {
		cluster string
		ok      bool
	}{{"prod", true}, {"", true}, {"staging", false}} {
		leaf, err := ca.Issue("app", []string{string(tokenapi.RoleClient)}, nil, pki.Options{Cluster: tc.cluster})
		if err != nil {
			t.Fatal(err)
		}
		cl := c.Client(t, tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool(), leaf.TLSCertificate())), tokenclient.WithMaxWait(3*time.Second))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cl.NextToken(ctx, "orders/42")
		cancel()
		if got := err == nil; got != tc.ok {
			t.Errorf("a client certificate of cluster %q: NextToken error %v; want success %v", tc.cluster, err, tc.ok)
		}
	}
}

// statusTerm reads the term node api reports on GET /v1/status, asked with
// cert (an admin's).
func statusTerm(t *testing.T, caFile string, cert tls.Certificate, api string) uint64 {
	t.Helper()
	pool, err := tlsfilesPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tokenclient.ClientTLSConfig(pool, cert)}, Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("https://" + api + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Term uint64 `json:"term"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status of %s: %s, %v", api, resp.Status, err)
	}
	return st.Term
}

func tlsfilesPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	return pool, nil
}

// Three "fencegate token serve" processes with certificates of cluster prod
// made by "fencegate token certs --cluster prod"; n3 is removed with
// "token members remove" and stopped. Its certificate files (what a
// decommissioned host keeps) then speak Raft to n1 and n2 with hashicorp's
// transport: an InstallSnapshot of counter 0 claiming the leader, and
// AppendEntries and RequestVote in a far term; so does a certificate of
// cluster staging made with the same CA for n2's ID. Each connection is
// closed unanswered, no term moves, and "token next" keeps increasing.
func TestCLIRemovedNodeAndOtherClusterRefused(t *testing.T) {
	dir := t.TempDir()
	certs, staging := filepath.Join(dir, "certs"), filepath.Join(dir, "staging")
	args := []string{"token", "certs", "--out", certs, "--cluster", "prod", "--client", "app", "--admin", "ops"}
	for i := range 3 {
		args = append(args, "--node", fmt.Sprintf("n%d=127.0.0.1", i+1))
	}
	if code, _, stderr := runCLI(t, args...); code != 0 {
		t.Fatalf("token certs: exit %d\n%s", code, stderr)
	}
	if err := os.MkdirAll(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		b, err := os.ReadFile(filepath.Join(certs, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(staging, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := runCLI(t, "token", "certs", "--out", staging, "--cluster", "staging", "--node", "n2=127.0.0.1"); code != 0 {
		t.Fatalf("token certs --cluster staging: exit %d\n%s", code, stderr)
	}
	var peers []string
	raftAddrs, api := make([]string, 3), make([]string, 3)
	for i := range 3 {
		raftAddrs[i], api[i] = testutil.FreeAddr(t), testutil.FreeAddr(t)
		peers = append(peers, fmt.Sprintf("n%d=%s=%s", i+1, raftAddrs[i], api[i]))
	}
	ca := filepath.Join(certs, "ca.pem")
	var procs []*proc
	for i := range 3 {
		id := "n" + strconv.Itoa(i+1)
		procs = append(procs, &proc{t: t, name: id, args: []string{
			"token", "serve", "--id", id, "--data-dir", filepath.Join(dir, id),
			"--raft-addr", raftAddrs[i], "--api-addr", api[i], "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--leader-lease-timeout", "150ms",
			"--tls-ca", ca, "--tls-cert", filepath.Join(certs, id+".pem"), "--tls-key", filepath.Join(certs, id+"-key.pem"),
		}})
	}
	startAll(t, procs)
	admin := []string{"--servers", strings.Join(api, ","), "--tls-ca", ca, "--tls-cert", filepath.Join(certs, "admin-ops.pem"), "--tls-key", filepath.Join(certs, "admin-ops-key.pem")}
	client := []string{"--servers", api[0] + "," + api[1], "--tls-ca", ca, "--tls-cert", filepath.Join(certs, "client-app.pem"), "--tls-key", filepath.Join(certs, "client-app-key.pem"), "--timeout", "20s"}
	next := func() int64 {
		t.Helper()
		code, out, stderr := runCLI(t, append([]string{"token", "next", "orders/42"}, client...)...)
		tok, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if code != 0 || err != nil {
			t.Fatalf("token next: exit %d %q\n%s", code, out, stderr)
		}
		return tok
	}
	before := next()
	if code, out, stderr := runCLI(t, append([]string{"token", "members", "remove", "n3"}, admin...)...); code != 0 {
		t.Fatalf("members remove n3: exit %d\n%s%s", code, out, stderr)
	}
	procs[2].kill()

	adminCert, err := tls.LoadX509KeyPair(filepath.Join(certs, "admin-ops.pem"), filepath.Join(certs, "admin-ops-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	terms := []uint64{statusTerm(t, ca, adminCert, api[0]), statusTerm(t, ca, adminCert, api[1])}
	pool, err := tlsfilesPool(ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []struct {
		name, dir, id, addr string
	}{
		{"removed n3", certs, "n3", raftAddrs[2]},
		{"n2 of cluster staging", staging, "n2", raftAddrs[1]},
	} {
		cert, err := tls.LoadX509KeyPair(filepath.Join(who.dir, who.id+".pem"), filepath.Join(who.dir, who.id+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		dial := func(addr string) (net.Conn, error) {
			cfg := &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
			return tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, cfg)
		}
		tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream: &dialOnly{dial: dial, closed: make(chan struct{})}, MaxPool: 1, Timeout: 3 * time.Second, Logger: hclog.NewNullLogger(),
		})
		for v := range 2 {
			if who.id == fmt.Sprintf("n%d", v+1) {
				continue // a node does not speak to itself
			}
			claim := 1 - v // the other remaining node, the leader or not
			for _, a := range raftAttacks {
				claimID, claimAddr := who.id, who.addr
				if a.name == "InstallSnapshot of counter 0" {
					claimID, claimAddr = fmt.Sprintf("n%d", claim+1), raftAddrs[claim]
				}
				if err := a.send(tr, fmt.Sprintf("n%d", v+1), raftAddrs[v], claimID, claimAddr, terms[v], 1<<20); err == nil {
					t.Errorf("%s with the certificate of %s as %s to n%d: answered; want the connection closed", a.name, who.name, claimID, v+1)
				}
			}
		}
		tr.Close()
	}
	for v := range 2 {
		if got := statusTerm(t, ca, adminCert, api[v]); got != terms[v] {
			t.Errorf("n%d's term moved from %d to %d during the attack", v+1, terms[v], got)
		}
	}
	if after := next(); after <= before {
		t.Fatalf("token next after the attack: %d, not above %d", after, before)
	}
}

// Must show: a joining node, which runs Raft without a configuration until
// the leader's first contact, admits only members of the cluster's
// committed configuration meanwhile: a peer certificate of a node that is
// not a member (removed, or never added) sends it AppendEntries and an
// InstallSnapshot in a far term before the leader does, and is refused;
// the leader then reaches it, it catches up and is promoted, and tokens
// keep increasing through it.
func TestJoiningNodeAdmitsOnlyMembers(t *testing.T) {
	ca := newCA(t, "cluster")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil))
	app := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)
	before := tokenservicetest.Mint(t, c.Client(t, app...), 20)
	leader := c.Leader(t)
	joiner := (leader + 1) % 3
	c.Remove(t, joiner)
	c.StartJoin(t, joiner)
	tr := raftAttacker(t, ca, issuePeer(t, ca, "n9", pki.Options{}))
	st := c.Node(joiner).LocalStatus()
	for _, a := range raftAttacks[:2] { // InstallSnapshot, AppendEntries
		if err := a.send(tr, c.ID(joiner), c.Node(joiner).RaftAddr(), "n9", "127.0.0.1:1", st.Term, 0); err == nil {
			t.Errorf("%s from non-member n9 to joining %s: answered; want the connection closed", a.name, c.ID(joiner))
		}
	}
	if got := c.Node(joiner).LocalStatus(); got.Term != st.Term || got.LastToken != 0 {
		t.Errorf("joining %s moved to term %d, counter %d; want term %d, counter 0", c.ID(joiner), got.Term, got.LastToken, st.Term)
	}
	c.AddMember(t, joiner)
	c.WaitVoter(t, joiner)
	after := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(joiner)}, app...), 5)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("token %d through the joined %s, not above %d", after[0], c.ID(joiner), before[len(before)-1])
	}
}

// A joining node admits the current leader only, asked again every
// second: not another member (which could claim a higher term before the
// leader's first contact), and not a member removed after the joining node
// first asked. With the member list a joining node used to fetch once and
// keep, the certificate of a node removed while the other waited for
// `members add` reset its counter, and tokens through it restarted at 1.
func TestJoiningNodeAdmitsOnlyTheLeader(t *testing.T) {
	ca := newCA(t, "cluster")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil))
	app := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)
	before := tokenservicetest.Mint(t, c.Client(t, app...), 20)
	leader := c.Leader(t)
	joiner, other := (leader+1)%3, (leader+2)%3
	c.Remove(t, joiner)
	c.StartJoin(t, joiner)
	tr := raftAttacker(t, ca, issuePeer(t, ca, c.ID(other), pki.Options{}))
	otherAddr := c.Node(other).RaftAddr() // Remove stops the node
	attack := func(when string) {
		t.Helper()
		st := c.Node(joiner).LocalStatus()
		for _, a := range raftAttacks[:2] { // InstallSnapshot, AppendEntries
			if err := a.send(tr, c.ID(joiner), c.Node(joiner).RaftAddr(), c.ID(other), otherAddr, st.Term, 1<<20); err == nil {
				t.Errorf("%s from %s %s to joining %s: answered; want the connection closed", a.name, c.ID(other), when, c.ID(joiner))
			}
		}
		if got := c.Node(joiner).LocalStatus(); got.Term != st.Term || got.LastToken != 0 {
			t.Errorf("joining %s moved to term %d, counter %d after RPCs from %s %s; want term %d, counter 0",
				c.ID(joiner), got.Term, got.LastToken, c.ID(other), when, st.Term)
		}
	}
	attack("while a member but not the leader")
	c.Remove(t, other)
	attack("just after its removal")
	time.Sleep(1200 * time.Millisecond) // past the joining node's refresh
	attack("a second after its removal")
	c.AddMember(t, joiner)
	c.WaitVoter(t, joiner)
	after := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(joiner)}, app...), 5)
	if after[0] <= before[len(before)-1] {
		t.Fatalf("token %d through the joined %s, not above %d", after[0], c.ID(joiner), before[len(before)-1])
	}
}

// A joining node asks only the members it joins through (--join) who
// leads, never the peers of its --peers list, which is the founding list
// and may name a member removed since. A review played such a removed
// member with its still-valid certificate: while the --join contact did
// not answer, the joining node fell back to --peers, asked the impostor,
// believed its answer naming itself leader, admitted its AppendEntries
// and InstallSnapshot, and after members add the cluster's counter went
// back to 0.
func TestJoiningNodeAsksOnlyItsJoinContacts(t *testing.T) {
	ca := newCA(t, "cluster")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil))
	app := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)
	tokenservicetest.Mint(t, c.Client(t, app...), 5)
	removed := (c.Leader(t) + 2) % 3
	removedAPI := strings.TrimPrefix(c.APIURL(removed), "https://")
	removedRaft := c.Node(removed).RaftAddr()
	c.Remove(t, removed)
	// The node to replace is the other follower: never remove the leader
	// here, so the survivor is a one-node cluster that leads at once.
	joiner := 3 - c.Leader(t) - removed
	c.Remove(t, joiner)
	leader := c.Leader(t)

	// The removed member's certificate answers at its old API address
	// that it leads a configuration listing the joining node.
	leaf := issuePeer(t, ca, c.ID(removed), pki.Options{})
	ln, err := tls.Listen("tcp", removedAPI, &tls.Config{Certificates: []tls.Certificate{leaf.TLSCertificate()}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("listen at the removed member's API address: %v", err)
	}
	var asked atomic.Int32
	impostor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"cluster_id":"forged","leader_id":%q,"members":[{"id":%q,"raft_addr":%q,"api_addr":%q,"suffrage":"Voter"},{"id":%q,"raft_addr":%q,"api_addr":"x:1","suffrage":"Voter"}]}`,
			c.ID(removed), c.ID(removed), removedRaft, removedAPI, c.ID(joiner), c.Node(joiner).RaftAddr())
	})}
	go impostor.Serve(ln)
	t.Cleanup(func() { impostor.Close() })

	c.StartJoinVia(t, joiner, []string{c.APIURL(leader)})
	c.Kill(leader) // the --join contact stops answering
	time.Sleep(1200 * time.Millisecond)
	tr := raftAttacker(t, ca, leaf)
	st := c.Node(joiner).LocalStatus()
	for _, a := range raftAttacks[:2] { // InstallSnapshot, AppendEntries
		if err := a.send(tr, c.ID(joiner), c.Node(joiner).RaftAddr(), c.ID(removed), removedRaft, st.Term, 1<<20); err == nil {
			t.Errorf("%s from removed %s to joining %s while its --join contact is down: answered; want the connection closed", a.name, c.ID(removed), c.ID(joiner))
		}
	}
	if got := c.Node(joiner).LocalStatus(); got.Term != st.Term || got.LastToken != 0 {
		t.Errorf("joining %s moved to term %d, counter %d; want term %d, counter 0", c.ID(joiner), got.Term, got.LastToken, st.Term)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("the joining node asked the removed member's address %d times; it is not among its --join contacts", n)
	}
}

// Every Raft RPC now passes through the layer's reading of it: a node that
// joins over mutual TLS after the log it needs was compacted catches up
// by InstallSnapshot (the snapshot's data streamed through the checked
// connection), and so does pipelined replication; tokens through it stay
// above every token before.
func TestSnapshotCatchUpOverTLS(t *testing.T) {
	ca := newCA(t, "cluster")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil), tokenservicetest.WithSnapshotThreshold(64, 16),
		tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 1 }))
	app := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)
	toks := tokenservicetest.Mint(t, c.Client(t, app...), 200)
	last := toks[len(toks)-1]
	testutil.WaitFor(t, 30*time.Second, "snapshots and compaction on every node", func() error {
		for i := range 3 {
			st := c.Node(i).Store().Status()
			if st.LastSnapshotIndex == 0 || st.FirstLogIndex <= 1 {
				return fmt.Errorf("%s: last snapshot %d, first log index %d", c.ID(i), st.LastSnapshotIndex, st.FirstLogIndex)
			}
		}
		return nil
	})
	n4 := c.AddNode(t)
	testutil.WaitFor(t, 30*time.Second, "n4 to catch up from a snapshot", func() error {
		st := c.Node(n4).Store().Status()
		if st.LastToken < last || st.LastSnapshotIndex == 0 {
			return fmt.Errorf("n4: last token %d, last snapshot %d", st.LastToken, st.LastSnapshotIndex)
		}
		return nil
	})
	after := tokenservicetest.Mint(t, c.ClientFor(t, []string{c.APIURL(n4)}, app...), 5)
	if after[0] <= last {
		t.Fatalf("token %d through n4, not above %d", after[0], last)
	}
}
