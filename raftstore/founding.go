package raftstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/fencegate/fencegate/tokenapi"
)

// Phases a node reports in its NodeState.
const (
	// PhaseFounding: an empty node given the voters of a new cluster; it
	// waits until it may found (see DESIGN.md, "Founding").
	PhaseFounding = "founding"
	// PhaseJoining: an empty node that waits to be let into an existing
	// cluster through membership.
	PhaseJoining = "joining"
	// PhaseRunning: Raft runs.
	PhaseRunning = "running"
)

// NodeState is what a node tells its peers about itself: before it starts
// Raft (so that an empty node can tell a new cluster from one that exists),
// and while it runs (so that the leader can tell whether a new member has
// caught up).
type NodeState struct {
	NodeID    string `json:"node_id"`
	DataDirID string `json:"data_dir_id"`
	Phase     string `json:"phase"`
	// HasState reports whether the data directory holds Raft state.
	HasState  bool   `json:"has_state"`
	ClusterID string `json:"cluster_id,omitempty"`
	// Peers are the voters a founding node was given.
	Peers []tokenapi.Peer `json:"peers,omitempty"`
	// Founding is the node's record of the founding it took part in.
	Founding *Founding `json:"founding,omitempty"`

	// Raft's view, while running.
	RaftState   string `json:"raft_state,omitempty"`
	Term        uint64 `json:"term,omitempty"`
	LastIndex   uint64 `json:"last_index,omitempty"`
	CommitIndex uint64 `json:"commit_index,omitempty"`
	// CommitTerm is the term of the entry at CommitIndex (0: unknown).
	CommitTerm   uint64 `json:"commit_term,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	LeaderID     string `json:"leader_id,omitempty"`

	// Held is what this node saw each peer's data directory hold while
	// the peer ran, by node id: a node that starts from a directory
	// below it was put back from an older copy.
	Held map[string]Held `json:"held,omitempty"`
}

// Configuration is the cluster's membership as its leader has committed it.
type Configuration struct {
	ClusterID string            `json:"cluster_id"`
	LeaderID  string            `json:"leader_id"`
	Members   []tokenapi.Member `json:"members"`
}

// Prober asks other nodes about themselves, over their API; package
// tokenservice implements it over HTTP. An empty node uses it before it
// starts Raft.
type Prober interface {
	// State returns the NodeState of the node whose API is at api.
	State(ctx context.Context, api string) (NodeState, error)
	// Configuration returns the committed configuration, asking the node
	// at api (which may answer with the leader's API to ask instead).
	Configuration(ctx context.Context, api string) (Configuration, error)
}

// probeResult is one peer's answer to a founding probe.
type probeResult struct {
	peer tokenapi.Peer
	st   NodeState
	err  error
}

// foundingDecision is what an empty node concludes from its peers' answers.
type foundingDecision struct {
	// found: every peer answered and the founding is safe.
	found bool
	// seen are the data directory ids of every voter, this node included,
	// to record in the founding record.
	seen map[string]string
	// refuse, when set, says why this node must never found: the cluster
	// exists and this node is not one of its founders.
	refuse error
	// waiting lists why the node cannot decide yet, one entry per peer.
	waiting []string
}

// samePeers reports whether two voter lists name the same nodes at the
// same Raft addresses (API addresses may differ in spelling).
func samePeers(a, b []tokenapi.Peer) bool {
	key := func(l []tokenapi.Peer) []string {
		out := make([]string, len(l))
		for i, s := range l {
			out[i] = s.ID + "=" + s.RaftAddr
		}
		sort.Strings(out)
		return out
	}
	return slices.Equal(key(a), key(b))
}

// decideFounding applies the founding rule. A node with an empty data
// directory founds only when every other voter answered and either
//
//   - holds no state, is itself founding, and was given the same voters; or
//   - holds state, founded with the same voters, and recorded this node's
//     data directory id among those it saw empty when it decided: then
//     this node was part of that founding and never took part in anything
//     since (its directory is the very one the peer saw empty).
//
// A peer that holds any other state means the cluster exists without this
// directory: this node lost its data or is new, and must be replaced.
func decideFounding(self identity, voters []tokenapi.Peer, answers []probeResult) foundingDecision {
	d := foundingDecision{seen: map[string]string{self.NodeID: self.DataDirID}}
	var holders []string
	for _, a := range answers {
		p := a.peer
		switch {
		case a.err != nil:
			d.waiting = append(d.waiting, fmt.Sprintf("%s at %s does not answer (%v)", p.ID, p.APIAddr, a.err))
		case a.st.NodeID != p.ID:
			d.waiting = append(d.waiting, fmt.Sprintf("the node at %s (%s's API address) says it is %q; check the peers list", p.APIAddr, p.ID, a.st.NodeID))
		case !a.st.HasState && a.st.Phase != PhaseFounding:
			d.waiting = append(d.waiting, fmt.Sprintf("%s holds no state but is %s, not founding", p.ID, a.st.Phase))
		case !a.st.HasState && !samePeers(a.st.Peers, voters):
			d.waiting = append(d.waiting, fmt.Sprintf("%s was started with another peers list (%s); give every node the same peers list", p.ID, peerList(a.st.Peers)))
		case !a.st.HasState:
			d.seen[p.ID] = a.st.DataDirID
		case a.st.Founding != nil && samePeers(a.st.Founding.Peers, voters) && self.DataDirID != "" &&
			a.st.Founding.Seen[self.NodeID] == self.DataDirID:
			// A founder that saw this very directory empty: this node is a
			// slower founder of the same cluster.
			d.seen[p.ID] = a.st.DataDirID
		default:
			holders = append(holders, describeHolder(p.ID, a.st))
		}
	}
	if len(holders) > 0 {
		d.refuse = fmt.Errorf("%w: node %s has an empty data dir, but %s; it lost its data or is new, and must not found a cluster: replace it through membership (remove %s, then add it back as a new member)",
			ErrMustReplace, self.NodeID, strings.Join(holders, "; "), self.NodeID)
		return d
	}
	d.found = len(d.waiting) == 0
	return d
}

func describeHolder(id string, st NodeState) string {
	s := fmt.Sprintf("%s holds the state of cluster %s", id, orUnknown(st.ClusterID))
	if st.LastIndex > 0 {
		s += fmt.Sprintf(" (last index %d, term %d)", st.LastIndex, st.Term)
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "(id not yet recorded)"
	}
	return s
}

func peerList(ps []tokenapi.Peer) string {
	if len(ps) == 0 {
		return "none"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.ID + "=" + p.RaftAddr
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// joinDecision is what an empty node in join mode concludes from the
// cluster's committed configuration.
type joinDecision struct {
	join   bool
	refuse error
}

// decideJoin applies the join rule: an empty node may start Raft to join
// only when the committed configuration lists it as a non-voter at its own
// Raft address, or not at all; never as a voter (the cluster would count
// the empty node's vote and acknowledgements as those of the member it
// replaces, which is the lost-disk bug), and never when its address
// belongs to another member.
func decideJoin(id, raftAddr string, conf Configuration) joinDecision {
	for _, m := range conf.Members {
		switch {
		case m.ID == id && m.Suffrage == "Voter":
			return joinDecision{refuse: fmt.Errorf("%w: cluster %s still lists %s as a voter at %s; remove it first (its lost data counted in the cluster's quorums), then add it as a new member",
				ErrStillVoter, orUnknown(conf.ClusterID), id, m.RaftAddr)}
		case m.ID == id && m.RaftAddr != raftAddr:
			return joinDecision{refuse: fmt.Errorf("%w: cluster %s lists %s at raft address %s, but this node listens on %s; remove %s and add it again with this address",
				ErrConflict, orUnknown(conf.ClusterID), id, m.RaftAddr, raftAddr, id)}
		case m.ID != id && m.RaftAddr == raftAddr:
			return joinDecision{refuse: fmt.Errorf("%w: raft address %s belongs to member %s of cluster %s; give this node another address",
				ErrConflict, raftAddr, m.ID, orUnknown(conf.ClusterID))}
		}
	}
	return joinDecision{join: true}
}

// checkForeign compares the cluster id in a data directory that holds state
// with what its peers report: a peer that holds the state of another
// cluster means this directory (or that peer) belongs elsewhere, and Raft
// must not start, or this node could campaign with another cluster's log.
func checkForeign(self identity, answers []probeResult) error {
	if self.ClusterID == "" {
		return nil
	}
	for _, a := range answers {
		if a.err != nil || !a.st.HasState || a.st.ClusterID == "" || a.st.ClusterID == self.ClusterID {
			continue
		}
		return fieldErr(fmt.Errorf("%w: the data directory holds cluster %s, but peer %s at %s holds cluster %s; start this node with the data directory of cluster %s, or give it an empty data directory and replace it through membership",
			ErrForeignDataDir, self.ClusterID, a.peer.ID, a.peer.APIAddr, a.st.ClusterID, a.st.ClusterID), "DataDir")
	}
	return nil
}
