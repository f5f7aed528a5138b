package tokenservice

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
}

// Member is one server of the Raft group.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	APIAddr  string `json:"api_addr"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// Status is one node's view of the cluster, as GET /v1/status returns it.
type Status struct {
	ID           string   `json:"id"`
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

// Wire forms of requests and responses.
type (
	// tokenRequest is either the single form {"resource":"R"} or the batch
	// form {"resources":["a","b"]} a coalescing Client sends.
	tokenRequest struct {
		Resource  string   `json:"resource,omitempty"`
		Resources []string `json:"resources,omitempty"`
	}
	// batchResponse answers the batch form: one token per resource, in
	// request order, consecutive from one committed entry.
	batchResponse struct {
		Tokens []batchToken `json:"tokens"`
		Term   uint64       `json:"term"`
		Index  uint64       `json:"index"`
		Leader string       `json:"leader"`
	}
	batchToken struct {
		Resource string `json:"resource"`
		Token    int64  `json:"token"`
	}
	tokenResponse struct {
		Resource string `json:"resource"`
		Token    int64  `json:"token"`
		Term     uint64 `json:"term"`
		Index    uint64 `json:"index"`
		Leader   string `json:"leader"`
	}
	// allocRequest/allocResponse are the follower-to-leader form: a whole
	// batch of a follower's requests in one call.
	allocRequest struct {
		Count int `json:"count"`
	}
	allocResponse struct {
		First  int64  `json:"first"`
		Count  int    `json:"count"`
		Term   uint64 `json:"term"`
		Index  uint64 `json:"index"`
		Leader string `json:"leader"`
	}
	memberRequest struct {
		ID       string `json:"id"`
		RaftAddr string `json:"raft_addr"`
		APIAddr  string `json:"api_addr"`
	}
	errorResponse struct {
		Error     string `json:"error"`
		Code      string `json:"code"`
		LeaderAPI string `json:"leader_api,omitempty"`
		LeaderID  string `json:"leader_id,omitempty"`
	}
)
