package raftstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/raft"
)

func voters3() []tokenapi.Peer {
	return []tokenapi.Peer{
		{ID: "n1", RaftAddr: "h1:7201", APIAddr: "http://h1:7101"},
		{ID: "n2", RaftAddr: "h2:7201", APIAddr: "http://h2:7101"},
		{ID: "n3", RaftAddr: "h3:7201", APIAddr: "http://h3:7101"},
	}
}

func empty(id, dirID string, peers []tokenapi.Peer) NodeState {
	return NodeState{NodeID: id, DataDirID: dirID, Phase: PhaseFounding, Peers: peers}
}

func running(id, dirID, cluster string, f *Founding) NodeState {
	return NodeState{NodeID: id, DataDirID: dirID, Phase: PhaseRunning, HasState: true, ClusterID: cluster, Founding: f, Term: 3, LastIndex: 57}
}

// The founding rule, case by case: who founds, who waits, who must be
// replaced.
func TestDecideFounding(t *testing.T) {
	v := voters3()
	self := identity{NodeID: "n1", DataDirID: "d-n1"}
	other := []tokenapi.Peer{v[0], v[1], {ID: "n4", RaftAddr: "h4:7201"}}
	foundedSeeingUs := &Founding{Peers: v, Seen: map[string]string{"n1": "d-n1", "n2": "d-n2", "n3": "d-n3"}}
	foundedSeeingOldUs := &Founding{Peers: v, Seen: map[string]string{"n1": "d-n1-before-the-wipe", "n2": "d-n2", "n3": "d-n3"}}
	down := errors.New("connection refused")
	cases := []struct {
		name    string
		answers []probeResult
		want    string // found, wait, refuse
		msg     string
	}{
		{"all empty, same peers", []probeResult{{v[1], empty("n2", "d-n2", v), nil}, {v[2], empty("n3", "d-n3", v), nil}}, "found", ""},
		{"one peer down", []probeResult{{v[1], empty("n2", "d-n2", v), nil}, {v[2], NodeState{}, down}}, "wait", "n3 at http://h3:7101 does not answer"},
		{"a peer with another peers list", []probeResult{{v[1], empty("n2", "d-n2", other), nil}, {v[2], empty("n3", "d-n3", v), nil}}, "wait", "another peers list"},
		{"another node at a peer's address", []probeResult{{v[1], empty("n7", "d-n7", v), nil}, {v[2], empty("n3", "d-n3", v), nil}}, "wait", `says it is "n7"`},
		{"a joining peer", []probeResult{{v[1], NodeState{NodeID: "n2", Phase: PhaseJoining}, nil}, {v[2], empty("n3", "d-n3", v), nil}}, "wait", "joining"},
		{"a slower founder: peers founded having seen this directory", []probeResult{
			{v[1], running("n2", "d-n2", "c-1", foundedSeeingUs), nil}, {v[2], empty("n3", "d-n3", v), nil}}, "found", ""},
		// The lost disk: the peers founded the cluster having seen this
		// node's old directory, which was wiped (and drew a new id).
		{"lost disk: peers saw another directory of this node", []probeResult{
			{v[1], running("n2", "d-n2", "c-1", foundedSeeingOldUs), nil}, {v[2], NodeState{}, down}}, "refuse", "n2 holds the state of cluster c-1"},
		{"a peer that joined later (no founding record)", []probeResult{
			{v[1], running("n2", "d-n2", "c-1", nil), nil}, {v[2], empty("n3", "d-n3", v), nil}}, "refuse", "must not found"},
		{"a peer of another cluster", []probeResult{
			{v[1], running("n2", "d-x", "c-other", &Founding{Peers: other, Seen: map[string]string{"n1": "d-n1"}}), nil}, {v[2], empty("n3", "d-n3", v), nil}}, "refuse", "c-other"},
		{"a refusal does not wait for a peer that is down", []probeResult{
			{v[1], NodeState{}, down}, {v[2], running("n3", "d-n3", "c-1", foundedSeeingOldUs), nil}}, "refuse", "n3 holds"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideFounding(self, v, tc.answers)
			got := "wait"
			var msg string
			switch {
			case d.refuse != nil:
				got, msg = "refuse", d.refuse.Error()
				if !errors.Is(d.refuse, ErrMustReplace) {
					t.Errorf("refusal %v is not ErrMustReplace", d.refuse)
				}
			case d.found:
				got = "found"
			default:
				msg = strings.Join(d.waiting, "; ")
			}
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Fatalf("decision %s (%s), want %s mentioning %q", got, msg, tc.want, tc.msg)
			}
			if got == "found" && (d.seen["n1"] != "d-n1" || d.seen["n2"] != "d-n2" || d.seen["n3"] != "d-n3") {
				t.Fatalf("founding record %v does not hold every voter's directory id", d.seen)
			}
		})
	}
	// A directory without an id (never asked) is never taken for one a
	// peer saw.
	d := decideFounding(identity{NodeID: "n1"}, v, []probeResult{{v[1], running("n2", "d-n2", "c-1", &Founding{Peers: v, Seen: map[string]string{"n1": ""}}), nil}})
	if d.refuse == nil {
		t.Fatalf("a directory without an id was taken for the one a peer saw: %+v", d)
	}
}

func TestDecideJoin(t *testing.T) {
	conf := func(ms ...tokenapi.Member) Configuration {
		return Configuration{ClusterID: "c-1", LeaderID: "n2", Members: ms}
	}
	n2 := tokenapi.Member{ID: "n2", RaftAddr: "h2:7201", Suffrage: "Voter"}
	n3 := tokenapi.Member{ID: "n3", RaftAddr: "h3:7201", Suffrage: "Voter"}
	cases := []struct {
		name string
		conf Configuration
		want error
	}{
		{"not listed", conf(n2, n3), nil},
		{"listed as non-voter", conf(n2, n3, tokenapi.Member{ID: "n1", RaftAddr: "h1:7201", Suffrage: "Nonvoter"}), nil},
		{"still a voter", conf(n2, n3, tokenapi.Member{ID: "n1", RaftAddr: "h1:7201", Suffrage: "Voter"}), ErrStillVoter},
		{"listed at another address", conf(n2, n3, tokenapi.Member{ID: "n1", RaftAddr: "h9:7201", Suffrage: "Nonvoter"}), ErrConflict},
		{"address of another member", conf(n2, tokenapi.Member{ID: "n3", RaftAddr: "h1:7201", Suffrage: "Voter"}), ErrConflict},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := decideJoin("n1", "h1:7201", tc.conf)
			if tc.want == nil && (!d.join || d.refuse != nil) {
				t.Fatalf("decideJoin = %+v, want join", d)
			}
			if tc.want != nil && (d.join || !errors.Is(d.refuse, tc.want)) {
				t.Fatalf("decideJoin = %+v, want %v", d, tc.want)
			}
		})
	}
}

func TestCheckForeign(t *testing.T) {
	self := identity{NodeID: "n1", ClusterID: "c-1"}
	p := tokenapi.Peer{ID: "n2", APIAddr: "http://h2:7101"}
	same := []probeResult{{p, running("n2", "d", "c-1", nil), nil}}
	other := []probeResult{{p, running("n2", "d", "c-2", nil), nil}}
	emptyPeer := []probeResult{{p, empty("n2", "d", nil), nil}}
	down := []probeResult{{p, NodeState{}, errors.New("refused")}}
	for name, ans := range map[string][]probeResult{"same cluster": same, "empty peer": emptyPeer, "peer down": down} {
		if err := checkForeign(self, ans); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := checkForeign(self, other); !errors.Is(err, ErrForeignDataDir) || !strings.Contains(err.Error(), "c-2") {
		t.Fatalf("peer of another cluster: %v, want ErrForeignDataDir naming c-2", err)
	}
	if err := checkForeign(identity{NodeID: "n1"}, other); err != nil {
		t.Fatalf("a directory without a recorded cluster id cannot be compared, got %v", err)
	}
}

// fakeTransport feeds RPCs to a vote gate and records the answers.
type fakeTransport struct {
	raft.Transport
	ch chan raft.RPC
}

func (f *fakeTransport) Consumer() <-chan raft.RPC { return f.ch }

func (f *fakeTransport) RequestPreVote(raft.ServerID, raft.ServerAddress, *raft.RequestPreVoteRequest, *raft.RequestPreVoteResponse) error {
	return nil
}

// The vote gate withholds votes, pre-votes and leadership transfers until
// the node sees itself a voter, passes everything else, and opens for good.
func TestVoteGate(t *testing.T) {
	ft := &fakeTransport{ch: make(chan raft.RPC)}
	g := newVoteGate(ft)
	defer g.Close()
	voter := false
	opened := 0
	g.start(func() bool { return voter }, func() { opened++ })
	send := func(cmd any) (passed bool, err error) {
		resp := make(chan raft.RPCResponse, 1)
		ft.ch <- raft.RPC{Command: cmd, RespChan: resp}
		select {
		case rpc := <-g.Consumer():
			rpc.Respond(nil, nil)
			return true, (<-resp).Error
		case r := <-resp:
			return false, r.Error
		}
	}
	for _, cmd := range []any{&raft.RequestVoteRequest{}, &raft.RequestPreVoteRequest{}, &raft.TimeoutNowRequest{}} {
		if passed, err := send(cmd); passed || !errors.Is(err, errVoteWithheld) {
			t.Fatalf("%T before promotion: passed %v, err %v; want withheld", cmd, passed, err)
		}
	}
	for _, cmd := range []any{&raft.AppendEntriesRequest{}, &raft.InstallSnapshotRequest{}} {
		if passed, _ := send(cmd); !passed {
			t.Fatalf("%T before promotion was withheld; the node must still catch up", cmd)
		}
	}
	voter = true
	if passed, err := send(&raft.RequestVoteRequest{}); !passed || err != nil {
		t.Fatalf("vote after promotion: passed %v, err %v", passed, err)
	}
	voter = false // demoted later: the gate stays open, the node keeps its state
	if passed, _ := send(&raft.RequestVoteRequest{}); !passed || opened != 1 {
		t.Fatalf("gate closed again after opening (passed %v, opened %d times)", passed, opened)
	}
}
