package tokenclient

import (
	"time"

	"github.com/fencegate/fencegate/internal/tokenwire"
)

// Token is a fencing token and where it came from.
type Token struct {
	// Resource is the resource the token was asked for (tokens come from one
	// global counter, so they also order grants across resources).
	Resource string
	// Value is the token: > 0, and greater than every token returned before
	// the request was sent.
	Value int64
	// Term and Index are the Raft term and log index of the entry that minted it.
	Term, Index uint64
	// Leader is the ID of the node that committed that entry.
	Leader string
	// Proof is the token's proof (KEYID.HEX, package tokensign) when the
	// service signs tokens, else "".
	Proof string
}

// Member is one server of the Raft group. CaughtUp, AppliedIndex and
// Problem are filled in the member list (Members) only.
type Member = tokenwire.Member

// Members is the member list as the leader has committed it.
type Members struct {
	ClusterID   string   `json:"cluster_id"`
	LeaderID    string   `json:"leader_id"`
	CommitIndex uint64   `json:"commit_index"`
	Members     []Member `json:"members"`
}

// Snapshot is the state `fencegate token snapshot` saves for disaster
// recovery: the cluster id and the counter, read on the leader after a
// barrier (so the counter is at least every token handed out before), at
// a log index and term, at a time.
type Snapshot struct {
	Format    string    `json:"format"`
	ClusterID string    `json:"cluster_id"`
	Counter   int64     `json:"counter"`
	Index     uint64    `json:"index"`
	Term      uint64    `json:"term"`
	Time      time.Time `json:"time"`
	Leader    string    `json:"leader"`
}

// SnapshotFormat names the snapshot file format.
const SnapshotFormat = "fencegate-token-snapshot/1"

// Restored is what a restore did: the counter before and after a committed
// entry that raised it to at least AtLeast (it never lowers it).
type Restored struct {
	AtLeast int64  `json:"at_least"`
	Before  int64  `json:"before"`
	After   int64  `json:"after"`
	Index   uint64 `json:"index"`
	Term    uint64 `json:"term"`
}

// StatusFields are the fields of GET /v1/status that the token service's
// Raft store reports (ID, ClusterID, LeaderID, LeaderAPI, State, Term,
// LastIndex, CommitIndex, AppliedIndex, LastToken, Members); raftstore
// names the same type. It is exported under this name so that callers can
// build a Status: Status{StatusFields: StatusFields{ID: "n1"}}.
type StatusFields = tokenwire.StatusFields

// Status is one node's view of the cluster, as GET /v1/status returns it:
// the fields of StatusFields, then ReadIndex.
type Status struct {
	StatusFields
	// ReadIndex is the read-index path's state on this node; nil with
	// Config.CommitPerBatch.
	ReadIndex *ReadIndexStatus `json:"read_index,omitempty"`
}

// ReadIndexStatus is a node's read-index path: the range it hands tokens
// out of while it leads, and its confirmation rounds.
type ReadIndexStatus struct {
	// Range is the reserved range in use; nil when none is held (the node
	// does not lead, or has not reserved yet in its term).
	Range *ReservedRange `json:"range,omitempty"`
	// RoundsPerSecond is the confirmation rounds begun over the last second.
	RoundsPerSecond float64 `json:"rounds_per_second"`
	// Rounds and RoundFailures count the rounds begun and failed since
	// start; Reservations the reservation entries committed.
	Rounds        uint64 `json:"rounds"`
	RoundFailures uint64 `json:"round_failures"`
	Reservations  uint64 `json:"reservations"`
}

// ReservedRange is a reserved range; see tokenwire.ReservedRange.
type ReservedRange = tokenwire.ReservedRange
