// Package tokenwire holds the JSON forms of the token service's requests
// and answers, shared by the server (tokenservice), its store (raftstore)
// and the client (tokenclient) so that all speak from one definition. It
// imports nothing, so the client can use it without the server's storage.
package tokenwire

// LeaderHeader carries, on a successful token answer, the API URL of the
// leader, so clients can skip the forwarding hop next time; LeaderIDHeader
// its ID, which a client over TLS requires of the node answering there.
const (
	LeaderHeader   = "X-Fencegate-Leader-Api"
	LeaderIDHeader = "X-Fencegate-Leader-Id"
)

// Wire forms of requests and responses.
type (
	// TokenRequest is either the single form {"resource":"R"} or the batch
	// form {"resources":["a","b"]} a coalescing Client sends.
	TokenRequest struct {
		Resource  string   `json:"resource,omitempty"`
		Resources []string `json:"resources,omitempty"`
	}
	// BatchResponse answers the batch form: one token per resource, in
	// request order, consecutive from one committed entry.
	BatchResponse struct {
		Tokens []BatchToken `json:"tokens"`
		Term   uint64       `json:"term"`
		Index  uint64       `json:"index"`
		Leader string       `json:"leader"`
	}
	BatchToken struct {
		Resource string `json:"resource"`
		Token    int64  `json:"token"`
		Proof    string `json:"proof,omitempty"`
	}
	TokenResponse struct {
		Resource string `json:"resource"`
		Token    int64  `json:"token"`
		Proof    string `json:"proof,omitempty"`
		Term     uint64 `json:"term"`
		Index    uint64 `json:"index"`
		Leader   string `json:"leader"`
	}
	// AllocRequest/AllocResponse are the follower-to-leader form: a whole
	// batch of a follower's requests in one call.
	AllocRequest struct {
		Count int `json:"count"`
	}
	AllocResponse struct {
		First  int64  `json:"first"`
		Count  int    `json:"count"`
		Term   uint64 `json:"term"`
		Index  uint64 `json:"index"`
		Leader string `json:"leader"`
	}
	// MemberRequest (POST /v1/members) names the server to add.
	MemberRequest  = Server
	ApiAddrRequest struct {
		APIAddr string `json:"api_addr"`
	}
	RestoreRequest struct {
		AtLeast int64 `json:"at_least"`
	}
	ErrorResponse struct {
		Error     string `json:"error"`
		Code      string `json:"code"`
		LeaderAPI string `json:"leader_api,omitempty"`
		LeaderID  string `json:"leader_id,omitempty"`
	}
)

// Server is one server of the cluster: its Raft ID and address, and the
// address of its token API. It is a founding peer (raftstore.Server) and
// the body of a request to add a member.
type Server struct {
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
// raftstore.Status and the client's Status embed it.
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
