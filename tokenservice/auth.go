package tokenservice

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
)

// Identity is who sent a request, established by a client certificate
// signed by the cluster CA (CN = Name, each OU naming a role) or by a bearer
// credential from the node's credentials file.
type Identity struct {
	Name  string
	Roles []tokenapi.Role
	// Method is "certificate" or "bearer" (or both, joined by "+").
	Method string
}

// Has reports whether the identity holds role r.
func (id Identity) Has(r tokenapi.Role) bool { return slices.Contains(id.Roles, r) }

type identityKey struct{}

// IdentityFrom returns the identity a handler's request was authenticated
// with; false when the node runs without TLS (no authentication).
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Credentials are the bearer credentials a node accepts, as read from its
// credentials file. The file holds only SHA-256 hashes of the secrets.
type Credentials struct {
	byName map[string]credential
}

type credential struct {
	hash  [sha256.Size]byte
	roles []tokenapi.Role
}

var credName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// minSecret is the shortest secret accepted: 32 bytes of randomness in
// base64url (NewClientCredential makes 43 characters).
const minSecret = 32

// LoadCredentials reads a node's credentials file: one credential a line,
//
//	NAME ROLES sha256:HEX
//
// where ROLES is client, admin or both joined by a comma, and HEX the
// SHA-256 of the secret (ClientCredential.ServerLine prints such a line).
// Blank lines and lines starting with # are ignored. The peer role is not
// allowed: nodes identify each other by certificate.
func LoadCredentials(path string) (*Credentials, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%w: cannot read %s: %v", tokenapi.ErrBadCredentials, path, err)
	}
	defer f.Close()
	return ParseCredentials(f, path)
}

// ParseCredentials parses a credentials file read from r; name names it in
// errors.
func ParseCredentials(r io.Reader, name string) (*Credentials, error) {
	c := &Credentials{byName: map[string]credential{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s line %d: %s", tokenapi.ErrBadCredentials, name, n, fmt.Sprintf(format, a...))
		}
		f := strings.Fields(line)
		if len(f) == 2 && len(f[1]) >= minSecret {
			return nil, bad("looks like a client's NAME SECRET line; a node's file holds NAME ROLES sha256:HEX (the secret's hash, never the secret)")
		}
		if len(f) != 3 {
			return nil, bad("want NAME ROLES sha256:HEX, e.g. app client sha256:<64 hex digits>")
		}
		if !credName.MatchString(f[0]) {
			return nil, bad("name %q: use letters, digits, '.', '_' or '-' (at most 64)", f[0])
		}
		if _, dup := c.byName[f[0]]; dup {
			return nil, bad("name %q appears twice; keep one line per name", f[0])
		}
		var cr credential
		for _, r := range strings.Split(f[1], ",") {
			switch tokenapi.Role(r) {
			case tokenapi.RoleClient, tokenapi.RoleAdmin:
				if !slices.Contains(cr.roles, tokenapi.Role(r)) {
					cr.roles = append(cr.roles, tokenapi.Role(r))
				}
			case tokenapi.RolePeer:
				return nil, bad("role peer is given only by certificates (nodes identify each other by certificate); use client or admin")
			default:
				return nil, bad("unknown role %q; use client, admin or client,admin", r)
			}
		}
		h, ok := strings.CutPrefix(f[2], "sha256:")
		raw, err := hex.DecodeString(h)
		if !ok || err != nil || len(raw) != sha256.Size {
			return nil, bad("the hash must be sha256: and 64 hex digits (the output of fencegate token credential)")
		}
		copy(cr.hash[:], raw)
		c.byName[f[0]] = cr
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: read %s: %v", tokenapi.ErrBadCredentials, name, err)
	}
	return c, nil
}

// Len returns how many credentials there are.
func (c *Credentials) Len() int {
	if c == nil {
		return 0
	}
	return len(c.byName)
}

// dummyHash is compared against when a name is unknown, so that an unknown
// name takes as long to refuse as a wrong secret.
var dummyHash [sha256.Size]byte

// check returns the identity of name and secret, or false.
func (c *Credentials) check(name, secret string) (Identity, bool) {
	sum := sha256.Sum256([]byte(secret))
	cr, found := c.byName[name]
	want := dummyHash
	if found {
		want = cr.hash
	}
	if subtle.ConstantTimeCompare(sum[:], want[:]) != 1 || !found {
		return Identity{}, false
	}
	return Identity{Name: name, Roles: slices.Clone(cr.roles), Method: "bearer"}, true
}

type authenticator struct {
	creds *Credentials // nil: certificates only
}

// identify returns the request's identity; false with a reason when it
// has none. A bearer credential that is present must be valid.
func (a *authenticator) identify(r *http.Request) (Identity, string, bool) {
	var id Identity
	var methods []string
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		leaf := r.TLS.VerifiedChains[0][0]
		id.Name, id.Roles = leaf.Subject.CommonName, tokenapi.RolesOf(leaf)
		methods = append(methods, "certificate")
	}
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		name, secret, ok2 := strings.Cut(tok, ":")
		if !ok || !ok2 {
			return Identity{}, "the Authorization header is not \"Bearer NAME:SECRET\"", false
		}
		if a.creds == nil {
			return Identity{}, "this node accepts no bearer credentials (it has no credentials file)", false
		}
		bid, ok := a.creds.check(name, secret)
		if !ok {
			if !credName.MatchString(name) {
				// Not a name: it could be a secret pasted in the wrong place.
				return Identity{}, "the bearer credential's name is malformed", false
			}
			return Identity{}, fmt.Sprintf("bearer credential %q is not valid (unknown name or wrong secret)", name), false
		}
		if id.Name == "" {
			id.Name = bid.Name
		} else if id.Name != bid.Name {
			id.Name += "+" + bid.Name
		}
		for _, r := range bid.Roles {
			if !id.Has(r) {
				id.Roles = append(id.Roles, r)
			}
		}
		methods = append(methods, "bearer")
	}
	if len(methods) == 0 {
		return Identity{}, "no client certificate and no bearer credential", false
	}
	id.Method = strings.Join(methods, "+")
	return id, "", true
}

// require wraps h so that it runs only for an identity that holds one of
// rt's roles: 401 without an identity, 403 with the wrong role, and 403
// for a Self route called by another identity than the member the path
// names, or a Member route called by a node that is not a member.
func (s *Server) require(rt Route, h http.HandlerFunc) http.HandlerFunc {
	if s.auth == nil {
		return h
	}
	needs := rolesText(rt.Roles)
	return func(w http.ResponseWriter, r *http.Request) {
		id, why, ok := s.auth.identify(r)
		if !ok {
			s.log.Info("refused request", "status", http.StatusUnauthorized, "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr, "reason", why)
			w.Header().Set("WWW-Authenticate", `Bearer realm="fencegate"`)
			s.writeError(w, fmt.Errorf("%w: %s %s needs %s: %s; present a certificate signed by the cluster CA or a bearer credential",
				tokenapi.ErrUnauthenticated, rt.Method, rt.Path, needs, why))
			return
		}
		if why := s.peerStanding(r, rt, id); why != "" {
			// The certificate's peer role does not count here; another
			// role the identity holds still may.
			id.Roles = slices.DeleteFunc(slices.Clone(id.Roles), func(x tokenapi.Role) bool { return x == tokenapi.RolePeer })
			if !slices.ContainsFunc(rt.Roles, id.Has) {
				s.log.Info("refused request", "status", http.StatusForbidden, "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr,
					"identity", id.Name, "reason", why)
				s.writeError(w, fmt.Errorf("%w: %s %s needs %s; the peer certificate of %q does not count: %s",
					tokenapi.ErrForbidden, rt.Method, rt.Path, needs, id.Name, why))
				return
			}
		}
		if !slices.ContainsFunc(rt.Roles, id.Has) {
			s.log.Info("refused request", "status", http.StatusForbidden, "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr,
				"identity", id.Name, "roles", id.Roles, "needs", needs)
			s.writeError(w, fmt.Errorf("%w: %s %s needs %s; %q (%s) has %s",
				tokenapi.ErrForbidden, rt.Method, rt.Path, needs, id.Name, id.Method, rolesText(id.Roles)))
			return
		}
		if rt.Self {
			// Only the member itself, by its own peer certificate.
			if want := r.PathValue("id"); id.Name != want || !strings.Contains(id.Method, "certificate") {
				s.log.Info("refused request", "status", http.StatusForbidden, "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr,
					"identity", id.Name, "reason", "not the member itself")
				s.writeError(w, fmt.Errorf("%w: %s %s may be called only by member %q itself, with its peer certificate (CN=%s); %q (%s) is not it",
					tokenapi.ErrForbidden, rt.Method, rt.Path, want, want, id.Name, id.Method))
				return
			}
		}
		if rt.Member {
			st := s.Store()
			if st == nil {
				s.writeError(w, fmt.Errorf("%w: node %s has not started Raft yet: %s", tokenapi.ErrUnavailable, s.cfg.ID, s.startingReason()))
				return
			}
			if !st.IsMember(id.Name) {
				// A peer certificate outlives its node's membership (there
				// is no revocation): only a current member may call.
				s.log.Info("refused request", "status", http.StatusForbidden, "method", r.Method, "path", r.URL.Path, "from", r.RemoteAddr,
					"identity", id.Name, "reason", "not a member")
				s.writeError(w, fmt.Errorf("%w: %s %s needs %s held by a current member of the cluster; %q is not one", tokenapi.ErrForbidden, rt.Method, rt.Path, needs, id.Name))
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), identityKey{}, id)))
	}
}

// beforeMembership are the peer routes a node calls before it is (or
// knows it is) a member: the founding question and the joining node's
// question for the committed configuration. They change nothing and carry
// no secret (what the answering node holds; the member list).
var beforeMembership = []string{"/v1/internal/state", "/v1/internal/configuration"}

// peerStanding says why the peer role of the request's certificate does
// not count on route rt ("" when it counts, or the route takes no peer).
// A peer certificate speaks for a node of this cluster only: it must name
// the same cluster as this node's certificate (exactly: none only where
// this node's names none), and, once Raft runs, its node (CN) must be in
// this node's latest Raft configuration, except on the routes a node calls
// before it is a member. A peer certificate outlives its node's membership
// (there is no revocation): a removed node is a stranger.
func (s *Server) peerStanding(r *http.Request, rt Route, id Identity) string {
	if !id.Has(tokenapi.RolePeer) || !slices.Contains(rt.Roles, tokenapi.RolePeer) || r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || s.cfg.TLS == nil {
		return ""
	}
	leaf := r.TLS.VerifiedChains[0][0]
	theirs, err := pki.ClusterOf(leaf)
	if err != nil {
		return err.Error()
	}
	if ours := s.cfg.TLS.cluster(); theirs != ours {
		return fmt.Sprintf("it names %s, this node's certificate %s", clusterText(theirs), clusterText(ours))
	}
	if slices.Contains(beforeMembership, rt.Path) {
		return ""
	}
	if st := s.Store(); st != nil && !st.IsMember(leaf.Subject.CommonName) {
		return fmt.Sprintf("node %q is not a member (not in this node's Raft configuration)", leaf.Subject.CommonName)
	}
	return ""
}

func rolesText(rs []tokenapi.Role) string {
	if len(rs) == 0 {
		return "no role"
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = string(r)
	}
	if len(parts) == 1 {
		return "role " + parts[0]
	}
	return "role " + strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}
