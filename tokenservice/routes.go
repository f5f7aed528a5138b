package tokenservice

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
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
	Roles []tokenapi.Role
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
	clientOnly    = []tokenapi.Role{tokenapi.RoleClient}
	adminOnly     = []tokenapi.Role{tokenapi.RoleAdmin}
	peerOnly      = []tokenapi.Role{tokenapi.RolePeer}
	clientOrAdmin = []tokenapi.Role{tokenapi.RoleClient, tokenapi.RoleAdmin}
	anyRole       = []tokenapi.Role{tokenapi.RolePeer, tokenapi.RoleClient, tokenapi.RoleAdmin}
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
	{Route{Method: "GET", Path: "/v1/floor", Roles: clientOrAdmin, Doc: "the counter as it was at least ?age=DURATION ago, from this node's checkpoints"},
		false, (*Server).handleFloor},
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
	{Route{Method: "GET", Path: "/v1/internal/view-stream", Roles: peerOnly, Doc: "the same answers on a kept connection (Connection: Upgrade, Upgrade: fencegate-view/1): 8 bytes a question"},
		false, (*Server).handleViewStream},
	{Route{Method: "GET", Path: "/v1/internal/state", Roles: peerOnly, Doc: "what this node holds and saw its peers hold, asked before founding, joining or resuming, and each second by every member"},
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

// PlaintextOpen reports whether rt answers to anyone on a node without TLS
// bound to an address other hosts can reach (Config.InsecurePlaintext): a
// route that changes nothing, and minting tokens (what the service is
// for). Every other route (membership, restore, a member's API address, a
// follower's allocations) answers there only to a loopback source or to
// the host of a member of the cluster (the host of its Raft address; for a
// route of one member, Self, the host of that member).
func PlaintextOpen(rt Route) bool {
	return rt.Method == http.MethodGet || rt.Method == http.MethodHead || slices.Contains(rt.Roles, tokenapi.RoleClient)
}

// Routes lists every endpoint of the node's API and who may call it.
func Routes() []Route {
	out := make([]Route, len(routeTable))
	for i, rt := range routeTable {
		out[i] = rt.Route
		out[i].Roles = append([]tokenapi.Role(nil), rt.Roles...)
	}
	return out
}

// routes is the handler chain of the API: every body capped at maxBody and
// a refused caller's connection closed (limits.go), then per route the
// plaintext guard (without TLS), authentication and roles (with TLS), the
// connection marked as authenticated, and the handler.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routeTable {
		serve := rt.serve
		h := func(w http.ResponseWriter, r *http.Request) { serve(s, w, r) }
		if !rt.beforeRaft {
			h = s.running(h)
		}
		if s.auth != nil {
			h = authenticated(h)
		}
		h = s.require(rt.Route, h)
		if s.auth == nil {
			h = s.plaintextGuard(rt.Route, h)
		}
		mux.HandleFunc(rt.Method+" "+rt.Path, h)
	}
	return s.limitRequests(mux)
}

// plaintextGuard lets a route that is not PlaintextOpen answer only to a
// loopback source or to the host of a member (for a Self route, of the
// member the path names), on a node without TLS. A request that passes from
// such a source marks its connection authenticated.
func (s *Server) plaintextGuard(rt Route, h http.HandlerFunc) http.HandlerFunc {
	open := PlaintextOpen(rt)
	return func(w http.ResponseWriter, r *http.Request) {
		ip := remoteIP(r.RemoteAddr)
		trusted := ip != nil && ip.IsLoopback()
		if !trusted && !open {
			self := ""
			if rt.Self {
				self = r.PathValue("id")
			}
			trusted = s.isMemberHost(r.Context(), ip, self)
		}
		if trusted {
			markAuthenticated(r.Context())
		} else if !open {
			s.log.Info("refused request", "status", http.StatusForbidden, "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr,
				"reason", "plain HTTP from a host that is not a member")
			s.writeError(w, fmt.Errorf("%w: %s %s changes the cluster; without TLS it answers only to loopback and to the hosts of the cluster's members, and %s is neither; call it from a member's host or configure TLS",
				tokenapi.ErrForbidden, rt.Method, rt.Path, r.RemoteAddr))
			return
		}
		h(w, r)
	}
}

// isMemberHost reports whether ip is the host of a member's Raft address
// (of member only, when only is not ""): a node calls another from the host
// its Raft address names. Before Raft runs the members are the founding
// peers. Host names are resolved.
func (s *Server) isMemberHost(ctx context.Context, ip net.IP, only string) bool {
	if ip == nil {
		return false
	}
	var addrs []string
	if st := s.Store(); st != nil {
		for _, m := range st.Status().Members {
			if only == "" || m.ID == only {
				addrs = append(addrs, m.RaftAddr)
			}
		}
	} else {
		for _, p := range s.cfg.Peers {
			if only == "" || p.ID == only {
				addrs = append(addrs, p.RaftAddr)
			}
		}
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil || host == "" {
			continue
		}
		if hip := net.ParseIP(host); hip != nil {
			if hip.Equal(ip) {
				return true
			}
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ips, err := net.DefaultResolver.LookupIP(lctx, "ip", host)
		cancel()
		if err == nil && slices.ContainsFunc(ips, ip.Equal) {
			return true
		}
	}
	return false
}

// authenticated marks the request's connection as authenticated: h runs
// only after require let the request through.
func authenticated(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		markAuthenticated(r.Context())
		h(w, r)
	}
}

// remoteIP is the IP of a request's RemoteAddr, nil if it has none.
func remoteIP(remote string) net.IP {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return net.ParseIP(host)
}
