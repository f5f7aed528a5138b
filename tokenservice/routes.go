package tokenservice

import (
	"net/http"
)

// Route is one endpoint of the API and who may call it. The handlers check
// nothing about the caller: the node enforces Roles, Self and Member for
// every route before its handler runs (when the node runs with TLS; without
// it every route is open, for loopback only).
type Route struct {
	Method string
	// Path is a net/http pattern path ("/v1/members/{id}").
	Path string
	// Roles are the roles that may call the route; an identity needs one
	// of them.
	Roles []Role
	// Self marks a peer route that only the member named by the path's
	// {id} may call: the caller's peer certificate must name {id} (CN). A
	// member's API address changes only on its own word.
	Self bool
	// Member marks a peer route that only a current member of the cluster
	// may call: a peer certificate outlives its node's membership (there is
	// no revocation).
	Member bool
	// Doc says what the route does, in one line.
	Doc string
}

var (
	clientOnly    = []Role{RoleClient}
	adminOnly     = []Role{RoleAdmin}
	peerOnly      = []Role{RolePeer}
	clientOrAdmin = []Role{RoleClient, RoleAdmin}
	anyRole       = []Role{RolePeer, RoleClient, RoleAdmin}
)

// routeTable is the API: each route, who may call it and its handler.
// beforeRaft marks the routes that answer while the node has not started
// Raft (it is deciding whether it may found or join); the others answer
// 503 until it runs.
var routeTable = []struct {
	Route
	beforeRaft bool
	serve      func(*Server, http.ResponseWriter, *http.Request)
}{
	{Route{Method: "POST", Path: "/v1/tokens", Roles: clientOnly, Doc: "mint a token (or a batch of tokens)"},
		false, (*Server).handleToken},
	{Route{Method: "GET", Path: "/v1/status", Roles: clientOrAdmin, Doc: "this node's view of the cluster"},
		true, (*Server).handleStatus},
	{Route{Method: "GET", Path: "/v1/members", Roles: clientOrAdmin, Doc: "the committed member list, with whether each member caught up (leader)"},
		false, (*Server).handleMembers},
	{Route{Method: "POST", Path: "/v1/members", Roles: adminOnly, Doc: "add a member as a non-voter; the leader promotes it once caught up (leader)"},
		false, (*Server).handleAddMember},
	{Route{Method: "DELETE", Path: "/v1/members/{id}", Roles: adminOnly, Doc: "remove a member, unless that would leave no quorum (leader)"},
		false, (*Server).handleRemoveMember},
	{Route{Method: "GET", Path: "/v1/snapshot", Roles: adminOnly, Doc: "the cluster id and counter, for disaster recovery (leader)"},
		false, (*Server).handleSnapshot},
	{Route{Method: "POST", Path: "/v1/restore", Roles: adminOnly, Doc: "raise the counter to at least a value, never lower it (leader)"},
		false, (*Server).handleRestore},
	{Route{Method: "PUT", Path: "/v1/members/{id}/api-addr", Roles: peerOnly, Self: true, Doc: "a member publishes its own API address (leader)"},
		false, (*Server).handleSetAPIAddr},
	{Route{Method: "POST", Path: "/v1/internal/allocate", Roles: peerOnly, Member: true, Doc: "allocate a follower's batch of tokens (leader)"},
		false, (*Server).handleAllocate},
	{Route{Method: "GET", Path: "/v1/internal/view", Roles: peerOnly, Doc: "this node's current term and the leader it follows, read now (a leader's confirmation round)"},
		false, (*Server).handleView},
	{Route{Method: "GET", Path: "/v1/internal/state", Roles: peerOnly, Doc: "what this node holds, asked before founding or joining"},
		true, (*Server).handleState},
	{Route{Method: "GET", Path: "/v1/internal/configuration", Roles: peerOnly, Doc: "the committed configuration, asked by a joining node (leader)"},
		false, (*Server).handleConfiguration},
	{Route{Method: "GET", Path: "/metrics", Roles: anyRole, Doc: "Prometheus metrics"},
		true, (*Server).handleMetrics},
	{Route{Method: "GET", Path: "/healthz", Roles: anyRole, Doc: "200 while the process serves"},
		true, (*Server).handleHealth},
	{Route{Method: "GET", Path: "/readyz", Roles: anyRole, Doc: "200 once the node knows a leader and has applied what it knows committed"},
		true, (*Server).handleReady},
}

// Routes lists every endpoint of the node's API and who may call it.
func Routes() []Route {
	out := make([]Route, len(routeTable))
	for i, rt := range routeTable {
		out[i] = rt.Route
		out[i].Roles = append([]Role(nil), rt.Roles...)
	}
	return out
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routeTable {
		serve := rt.serve
		h := func(w http.ResponseWriter, r *http.Request) { serve(s, w, r) }
		if !rt.beforeRaft {
			h = s.running(h)
		}
		mux.HandleFunc(rt.Method+" "+rt.Path, s.require(rt.Route, h))
	}
	return mux
}
