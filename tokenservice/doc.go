// Package tokenservice serves fencing tokens from a three-node (or larger)
// Raft group built on package raftstore. Its Go client is package
// tokenclient, which imports neither Raft nor bbolt. The JSON forms of the
// requests and answers below, the error codes and errors, and the roles are
// defined in package tokenapi, which server and client share.
//
// # Guarantee
//
// A token returned by Next is greater than every token any node returned
// before Next was called, across leader changes, crashes of any or all
// nodes, and restarts. Tokens come from one global counter that is advanced
// only when a committed Raft log entry is applied (see raftstore), so a
// token is durable on a quorum before anyone sees it, and a deposed leader
// cannot mint. Tokens are int64 values above zero, so they fit a PostgreSQL
// bigint. They are not dense: a request that failed or timed out may have
// consumed a token nobody saw.
//
// # API: HTTP/JSON
//
// Every node serves the same API on its --api-addr. Routes lists every
// endpoint with the roles it needs (client, admin, peer):
//
//	POST   /v1/tokens         client: {"resource":"R"} → {"resource":"R","token":123,"term":2,"index":57,"leader":"n1"}
//	POST   /v1/tokens         batch form, up to MaxBatchResources (4096) names:
//	                          {"resources":["a","b"]} → {"tokens":[{"resource":"a","token":124},
//	                          {"resource":"b","token":125}],"term":2,"index":58,"leader":"n1"}
//	                          (consecutive tokens from one entry, in request order; one bad
//	                          name refuses the whole request with 400)
//	GET    /v1/status         client, admin: this node's view: id, cluster_id, leader_id, leader_api, state, term,
//	                          last_index, commit_index, applied_index, last_token, members, and
//	                          read_index: the reserved range in use (leader) and the rounds per second
//	GET    /v1/members        client, admin: the committed members, with whether each has caught up (leader)
//	POST   /v1/members        admin: {"id":"n4","raft_addr":"HOST:PORT","api_addr":"http://HOST:PORT"}
//	                          adds a running node as a non-voter; the leader promotes it once
//	                          caught up (leader)
//	DELETE /v1/members/{id}   admin: remove a member, unless the voters left could not form a
//	                          quorum (leader)
//	GET    /v1/snapshot       admin: cluster id and counter, for disaster recovery (leader)
//	POST   /v1/restore        admin: {"at_least":N} raises the counter, never lowers it (leader)
//	GET    /metrics           any role: Prometheus metrics
//	GET    /healthz           any role: 200 while the process serves
//	GET    /readyz            any role: 200 once the node knows a leader and has applied all it knows committed
//
// and, between nodes (role peer): POST /v1/internal/allocate (a follower's
// batch; members only), GET /v1/internal/state and
// /v1/internal/configuration (what an empty node asks before it founds or
// joins; the state also what a node with state asks before it resumes,
// and what every member asks each other once a second, to catch a data
// directory put back from an older copy), GET /v1/internal/view (a leader's confirmation round: the
// node's current term and the leader it follows, read when it answers)
// and GET /v1/internal/view-stream (the same answers on a kept connection,
// 8 bytes a question, viewstream.go),
// PUT /v1/members/{id}/api-addr (a member publishes its own API address:
// only the peer whose certificate names {id} may call it).
//
// By default (Config.CommitPerBatch false) the leader hands tokens out of a
// range it reserved with one committed entry, each batch only after a
// confirmation round in which a majority of the voters answered that they
// still follow it in its term; see raftstore's DESIGN.md for why such a
// token is larger than every token returned before its request arrived.
//
// Errors are JSON {"error":"...","code":"..."} with code bad_request (400),
// unauthenticated (401) and forbidden (403), each naming what the route
// needs, refused (409: a membership change or restore that must not be
// retried as it is), not_leader (503, with "leader_api" and "leader_id"
// when known), no_quorum or unavailable (503; retry) and internal (500). A
// follower forwards token requests to the leader (at most 2 hops),
// batching its concurrent requests into one forwarded call, so clients may
// talk to any node; membership, snapshot and restore are answered by the
// leader only (others answer not_leader with its address and ID, which the
// Client follows: the leader sees the caller's own identity).
//
// # Founding and replacing nodes
//
// A node whose data directory is empty founds the cluster with Config.Peers
// only when every peer answers and none holds the state of a cluster
// founded without it; Start otherwise fails with raftstore.ErrMustReplace
// (or waits, with Config.WaitForFounding). A node that lost its data comes
// back through membership: RemoveMember, Start with Config.Join, AddMember;
// the leader promotes it once it has caught up. See raftstore's DESIGN.md.
// With TLS these questions between nodes go over mutual TLS with the peer
// role, and an answer counts only from the node its certificate names.
//
// HTTP/JSON rather than gRPC: the API is four small calls; HTTP/JSON is
// answered by curl, by any language without generated stubs, and by the
// benchmark and acceptance scripts that drive the service from outside Go.
// The cost gRPC would save (HTTP/1.1 framing and JSON encoding, a few
// microseconds per request) is small next to a Raft commit with fsync, and
// group commit amortises the commit, not the transport. Keep-alive
// connections avoid per-request handshakes.
//
// # Security: TLS, identities, roles
//
// With Config.TLS (LoadNodeTLS) a node serves the API over TLS, speaks
// mutual TLS on Raft and to other nodes, and authenticates every request.
// An identity comes from a client certificate of the cluster CA (each OU of
// its subject a role, the CN its name; a node's CN is its ID) or from a
// bearer credential ("Authorization: Bearer NAME:SECRET") listed, as a
// SHA-256 hash, in the node's credentials file (LoadCredentials). Roles
// (tokenapi.Role):
// peer (Raft and the calls between nodes; certificates only), client
// (tokens, status, member list) and admin (membership, snapshot, restore,
// status, member list); any role reads /metrics, /healthz and /readyz;
// Routes lists what each route needs. A follower forwards only to the leader its Raft names and accepts
// the answer only from a node presenting that leader's peer certificate.
// Without TLS every route is open: for loopback only. See DESIGN.md.
//
// # Client
//
// See package tokenclient, and package tokenapi for the wire forms.
//
// # Testing
//
// Package tokenservicetest starts a cluster inside a test process
// (StartCluster), on listeners bound to port 0; like hashicorp/raft's
// MakeCluster it is not a stable API.
package tokenservice
