// Package tokenwire holds the JSON forms of the token service's requests
// and answers, shared by the server (tokenservice) and the client
// (tokenclient) so that both speak from one definition.
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
	MemberRequest struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
		APIAddr  string `json:"api_addr"`
	}
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
