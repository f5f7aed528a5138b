package tokenclient

import (
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/internal/tlsfiles"
)

var (
	// ErrBadRequest means the request itself is wrong (for example an empty
	// resource name); retrying it cannot help.
	ErrBadRequest = errors.New("tokenservice: bad request")
	// ErrEmptyResource is the ErrBadRequest for an empty resource name.
	ErrEmptyResource = fmt.Errorf("%w: empty resource name; name the resource the token fences", ErrBadRequest)
	// ErrNotLeader means the node is not the leader and could not forward.
	// Retryable, preferably on the leader it names.
	ErrNotLeader = errors.New("tokenservice: not leader")
	// ErrNoQuorum means the node cannot reach a quorum: it knows no leader
	// (no entry was written for the request), or it lost its leadership
	// after appending the request's entry and before committing it (a new
	// leader may still commit that entry; its tokens are then never handed
	// out). Either way no token was handed out for the request. Retryable.
	ErrNoQuorum = errors.New("tokenservice: no quorum")
	// ErrUnavailable means the node could not serve the request right now
	// (shutting down, overloaded, or unreachable). Retryable.
	ErrUnavailable = errors.New("tokenservice: unavailable")
	// ErrNotRunning means that no node accepted a connection at all, twice
	// over every URL the client knows: nothing listens there (or the host
	// does not exist). It wraps ErrUnavailable. The client returns it at
	// once instead of retrying until its deadline.
	ErrNotRunning = fmt.Errorf("%w: no token service node is running", ErrUnavailable)
	// ErrRefused means a membership change or a restore was refused: it
	// names an id or an address of another member, a member that already
	// votes, a node that does not answer, or it would leave the cluster
	// without a quorum. The message says what to do instead. Not
	// retryable as it is.
	ErrRefused = errors.New("tokenservice: refused")
	// ErrExhausted (HTTP 409) means the counter cannot hand out the tokens
	// asked: fewer remain below the largest token, 2^63-1. Tokens never
	// go past it, so retrying cannot help; a request for fewer tokens may
	// still be served while any remain.
	ErrExhausted = errors.New("tokenservice: token counter exhausted")
	// ErrInternal is an unexpected server-side failure.
	ErrInternal = errors.New("tokenservice: internal error")
	// ErrNoServers is returned by NewClient without server addresses.
	ErrNoServers = errors.New("tokenservice: no servers given")
	// ErrUnauthenticated (HTTP 401) means the request carried no valid
	// identity: no client certificate of the cluster CA, no valid bearer
	// credential. The message names the role the route needs.
	ErrUnauthenticated = errors.New("tokenservice: unauthenticated")
	// ErrForbidden (HTTP 403) means the request's identity lacks the role
	// the route needs; the message names it.
	ErrForbidden = errors.New("tokenservice: forbidden")
	// ErrBadTLS means a certificate, key or CA file cannot be used: missing
	// or unreadable, not PEM, expired, signed by another CA, a key that does
	// not match, or a certificate without the role it needs. The message
	// names the file.
	ErrBadTLS = tlsfiles.ErrBadTLS
	// ErrBadCredentials means a credentials file cannot be used; the
	// message names the file and the line.
	ErrBadCredentials = errors.New("tokenservice: bad credentials file")
)

// Error codes carried in the "code" field of an error response.
const (
	CodeBadRequest  = "bad_request"
	CodeNotLeader   = "not_leader"
	CodeNoQuorum    = "no_quorum"
	CodeUnavailable = "unavailable"
	CodeRefused     = "refused"
	CodeInternal    = "internal"
	// CodeExhausted (409) answers a request the counter cannot serve
	// without going past the largest token.
	CodeExhausted = "exhausted"
	// CodeUnauthenticated (401) and CodeForbidden (403) answer requests
	// without an identity or without the role a route needs.
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
)

// APIError is an error answered by a node. It unwraps to the sentinel of its
// code (ErrBadRequest, ErrNotLeader, ErrNoQuorum, ErrUnavailable, ErrRefused,
// ErrExhausted, ErrUnauthenticated, ErrForbidden, ErrInternal).
type APIError struct {
	Status    int    // HTTP status
	Code      string // one of the Code constants
	Message   string
	LeaderAPI string // the leader's API URL, when the node knows it
	LeaderID  string // the leader's ID, when the node knows it
}

func (e *APIError) Error() string { return e.Message }

// Unwrap returns the sentinel of e's code.
func (e *APIError) Unwrap() error { return codeSentinel(e.Code) }

// Retryable reports whether the same request may succeed later.
func (e *APIError) Retryable() bool {
	switch e.Code {
	case CodeBadRequest, CodeRefused, CodeExhausted, CodeUnauthenticated, CodeForbidden:
		return false
	}
	return true
}

func codeSentinel(code string) error {
	switch code {
	case CodeBadRequest:
		return ErrBadRequest
	case CodeNotLeader:
		return ErrNotLeader
	case CodeNoQuorum:
		return ErrNoQuorum
	case CodeUnavailable:
		return ErrUnavailable
	case CodeRefused:
		return ErrRefused
	case CodeExhausted:
		return ErrExhausted
	case CodeUnauthenticated:
		return ErrUnauthenticated
	case CodeForbidden:
		return ErrForbidden
	default:
		return ErrInternal
	}
}
