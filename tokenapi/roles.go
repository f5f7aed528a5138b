package tokenapi

import (
	"crypto/x509"
	"slices"
)

// Role is what an identity may do. A route needs one of a set of roles
// (see tokenservice.Routes); an identity holds one or more. A certificate
// names its roles in its subject's OUs; a bearer credential's roles are
// those the node's credentials file gives it.
type Role string

// The roles.
const (
	// RolePeer is a node of the cluster: Raft, forwarding token requests
	// to the leader, internal allocation, the questions an empty node asks
	// before it founds or joins, and publishing its own API address. Only
	// certificates give it.
	RolePeer Role = "peer"
	// RoleClient mints tokens and reads status and the member list.
	RoleClient Role = "client"
	// RoleAdmin changes membership, takes snapshots and restores, and
	// reads status and the member list.
	RoleAdmin Role = "admin"
)

// Roles lists every role.
var Roles = []Role{RolePeer, RoleClient, RoleAdmin}

// RolesOf reads the roles of a certificate from its subject's OUs, each
// once, in the order they appear; OUs that name no role are skipped.
func RolesOf(c *x509.Certificate) []Role {
	var out []Role
	for _, ou := range c.Subject.OrganizationalUnit {
		if r := Role(ou); slices.Contains(Roles, r) && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}
