package tokenapi

import "time"

// LeaderHeader carries, on a successful token answer, the API URL of the
// leader, so clients can skip the forwarding hop next time.
const LeaderHeader = "X-Fencegate-Leader-Api"

// LeaderIDHeader carries, next to LeaderHeader, the leader's ID, which a
// client over TLS requires of the node answering at that URL.
const LeaderIDHeader = "X-Fencegate-Leader-Id"

// TokenRequest is the body of POST /v1/tokens: either the single form
// {"resource":"R"} or the batch form {"resources":["a","b"]} a coalescing
// client sends.
type TokenRequest struct {
	Resource  string   `json:"resource,omitempty"`
	Resources []string `json:"resources,omitempty"`
}

// TokenResponse answers the single form of TokenRequest: the token, its
// proof when the service signs tokens, and the Raft term and log index of
// the entry that minted it on the leader named.
type TokenResponse struct {
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Proof    string `json:"proof,omitempty"`
	Term     uint64 `json:"term"`
	Index    uint64 `json:"index"`
	Leader   string `json:"leader"`
}

// BatchResponse answers the batch form of TokenRequest: one token per
// resource, in request order, consecutive from one committed entry.
type BatchResponse struct {
	Tokens []BatchToken `json:"tokens"`
	Term   uint64       `json:"term"`
	Index  uint64       `json:"index"`
	Leader string       `json:"leader"`
}

// BatchToken is one resource's token in a BatchResponse, with its proof
// when the service signs tokens.
type BatchToken struct {
	Resource string `json:"resource"`
	Token    int64  `json:"token"`
	Proof    string `json:"proof,omitempty"`
}

// AllocRequest is the body of POST /v1/internal/allocate, the
// follower-to-leader form: a whole batch of a follower's requests in one
// call, asking for Count consecutive tokens.
type AllocRequest struct {
	Count int `json:"count"`
}

// AllocResponse answers an AllocRequest: Count consecutive tokens from
// First, minted by the entry at Term and Index on the leader named.
type AllocResponse struct {
	First  int64  `json:"first"`
	Count  int    `json:"count"`
	Term   uint64 `json:"term"`
	Index  uint64 `json:"index"`
	Leader string `json:"leader"`
}

// APIAddrRequest is the body of PUT /v1/members/{id}/api-addr: the API
// URL a member publishes for itself.
type APIAddrRequest struct {
	APIAddr string `json:"api_addr"`
}

// RestoreRequest is the body of POST /v1/restore: the value the counter
// is raised to at least.
type RestoreRequest struct {
	AtLeast int64 `json:"at_least"`
}

// ErrorResponse is the body of every error answer: a message, one of the
// Code constants, and, with CodeNotLeader, the leader's API URL and ID
// when the node knows them.
type ErrorResponse struct {
	Error     string `json:"error"`
	Code      string `json:"code"`
	LeaderAPI string `json:"leader_api,omitempty"`
	LeaderID  string `json:"leader_id,omitempty"`
}

// FloorResponse is the answer of GET /v1/floor: the counter as it was at
// least Age ago by the answering node's clock (Floor, a JSON number like
// the tokens of /v1/tokens), the leader's time of the checkpoint it comes
// from (At, RFC 3339, UTC; absent when no checkpoint is that old, and Floor
// is then 0), the age asked, and the node that answered.
type FloorResponse struct {
	Floor  int64  `json:"floor"`
	At     string `json:"at,omitempty"`
	Age    string `json:"age"`
	NodeID string `json:"node_id"`
}

// Peer is one server of the cluster: its Raft ID and address, and the
// address of its token API (kept in the replicated state so every node can
// forward to the leader). It is a voter a new cluster is founded with
// ("ID=RAFTADDR=APIADDR" on the command line), and the body of POST
// /v1/members, the server to add.
type Peer struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
}

// Member is one server of the Raft group, as the store reads it from its
// configuration and as GET /v1/status and GET /v1/members return it.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	// Suffrage is "Voter" or "Nonvoter" (a new member catching up).
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
	// The fields below are filled by the leader in the member list (GET
	// /v1/members) only, from asking each member: whether it has applied
	// every entry the leader had committed when it asked (nil when the
	// member did not answer), its applied index, and why it did not answer.
	CaughtUp     *bool  `json:"caught_up,omitempty"`
	AppliedIndex uint64 `json:"applied_index,omitempty"`
	Problem      string `json:"problem,omitempty"`
}

// StatusFields is one node's local view of the cluster: what the store
// reports and GET /v1/status returns, in that answer's order. Both
// raftstore.Status and Status embed it, so a caller builds a Status as
// Status{StatusFields: StatusFields{ID: "n1"}}.
type StatusFields struct {
	ID           string   `json:"id"`
	ClusterID    string   `json:"cluster_id,omitempty"`
	LeaderID     string   `json:"leader_id"`
	LeaderAPI    string   `json:"leader_api"`
	State        string   `json:"state"`
	Term         uint64   `json:"term"`
	LastIndex    uint64   `json:"last_index"`
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"`
	LastToken    int64    `json:"last_token"`
	Members      []Member `json:"members"`
}

// ReservedRange is the range a leader on the read-index path hands tokens
// out of: Next is the next token it hands out, Last the last one reserved;
// Term and Index are those of the reservation entry of the range Next is in.
type ReservedRange struct {
	Next  int64  `json:"next"`
	Last  int64  `json:"last"`
	Term  uint64 `json:"term"`
	Index uint64 `json:"index"`
}

// Members is the answer of GET /v1/members: the member list as the leader
// has committed it, at CommitIndex.
type Members struct {
	ClusterID   string   `json:"cluster_id"`
	LeaderID    string   `json:"leader_id"`
	CommitIndex uint64   `json:"commit_index"`
	Members     []Member `json:"members"`
}

// Snapshot is the answer of GET /v1/snapshot, the state `fencegate token
// snapshot` saves for disaster recovery: the cluster id and the counter,
// read on the leader after a barrier (so the counter is at least every
// token handed out before), at a log index and term, at a time.
type Snapshot struct {
	Format    string    `json:"format"`
	ClusterID string    `json:"cluster_id"`
	Counter   int64     `json:"counter"`
	Index     uint64    `json:"index"`
	Term      uint64    `json:"term"`
	Time      time.Time `json:"time"`
	Leader    string    `json:"leader"`
}

// SnapshotFormat names the snapshot file format (Snapshot.Format).
const SnapshotFormat = "fencegate-token-snapshot/1"

// Restored is the answer of POST /v1/restore: the counter before and
// after a committed entry that raised it to at least AtLeast (it never
// lowers it).
type Restored struct {
	AtLeast int64  `json:"at_least"`
	Before  int64  `json:"before"`
	After   int64  `json:"after"`
	Index   uint64 `json:"index"`
	Term    uint64 `json:"term"`
}

// Status is the answer of GET /v1/status, one node's view of the cluster:
// the fields of StatusFields, then ReadIndex.
type Status struct {
	StatusFields
	// ReadIndex is the read-index path's state on this node; nil when the
	// service commits one entry per batch (tokenservice
	// Config.CommitPerBatch).
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
