package tokenservice

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Role is who may call a route.
type Role string

// The roles of the API.
const (
	// RolePublic: anyone; liveness and readiness probes.
	RolePublic Role = "public"
	// RoleClient: applications; tokens, status, the member list, metrics.
	RoleClient Role = "client"
	// RolePeer: the other nodes of the cluster; forwarded allocations,
	// questions asked before Raft starts, and a member's own API address.
	RolePeer Role = "peer"
	// RoleAdmin: operators; membership changes, snapshot and restore.
	RoleAdmin Role = "admin"
)

// Route is one endpoint of the API and the role it needs.
type Route struct {
	Method string
	// Path is a net/http pattern path ("/v1/members/{id}").
	Path string
	Role Role
	// Self marks a peer route that only the member named by the path's
	// {id} may call: a member's API address changes only on its own word.
	Self bool
	// Doc says what the route does, in one line.
	Doc     string
	Handler http.HandlerFunc
}

// Routes returns every endpoint of the node's API. The handlers check
// nothing about the caller; whoever serves them enforces Role and Self.
func (s *Server) Routes() []Route {
	return []Route{
		{"POST", "/v1/tokens", RoleClient, false, "mint a token (or a batch of tokens)", s.running(s.handleToken)},
		{"GET", "/v1/status", RoleClient, false, "this node's view of the cluster", s.handleStatus},
		{"GET", "/v1/members", RoleClient, false, "the committed member list, with whether each member caught up (leader)", s.running(s.handleMembers)},
		{"GET", "/metrics", RoleClient, false, "Prometheus metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP},
		{"POST", "/v1/members", RoleAdmin, false, "add a member as a non-voter; the leader promotes it once caught up (leader)", s.running(s.handleAddMember)},
		{"DELETE", "/v1/members/{id}", RoleAdmin, false, "remove a member, unless that would leave no quorum (leader)", s.running(s.handleRemoveMember)},
		{"GET", "/v1/snapshot", RoleAdmin, false, "the cluster id and counter, for disaster recovery (leader)", s.running(s.handleSnapshot)},
		{"POST", "/v1/restore", RoleAdmin, false, "raise the counter to at least a value, never lower it (leader)", s.running(s.handleRestore)},
		{"PUT", "/v1/members/{id}/api-addr", RolePeer, true, "a member publishes its own API address (leader)", s.running(s.handleSetAPIAddr)},
		{"POST", "/v1/internal/allocate", RolePeer, false, "allocate a follower's batch of tokens (leader)", s.running(s.handleAllocate)},
		{"GET", "/v1/internal/state", RolePeer, false, "what this node holds, asked before founding or joining", s.handleState},
		{"GET", "/v1/internal/configuration", RolePeer, false, "the committed configuration, asked by a joining node (leader)", s.running(s.handleConfiguration)},
		{"GET", "/healthz", RolePublic, false, "200 while the process serves", s.handleHealth},
		{"GET", "/readyz", RolePublic, false, "200 once the node knows a leader and has applied what it knows committed", s.handleReady},
	}
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, r := range s.Routes() {
		mux.HandleFunc(r.Method+" "+r.Path, r.Handler)
	}
	return mux
}
