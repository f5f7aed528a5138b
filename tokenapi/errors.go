package tokenapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
)

// The errors the service answers with, and the errors of reading the TLS
// and credentials files both sides read. An *APIError unwraps to the one of
// its code, so errors.Is(err, ErrNoQuorum) holds for a client's error as
// for the server's.
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
	ErrBadTLS = errors.New("tokenservice: bad TLS material")
	// ErrBadCredentials means a credentials file (a node's or a client's)
	// cannot be used; the message names the file and the line.
	ErrBadCredentials = errors.New("tokenservice: bad credentials file")
)

// Error codes carried in the "code" field of an ErrorResponse.
const (
	// CodeBadRequest (400) answers a malformed request; see ErrBadRequest.
	CodeBadRequest = "bad_request"
	// CodeNotLeader (503) answers a request only the leader serves, with
	// the leader's API URL and ID when known; see ErrNotLeader.
	CodeNotLeader = "not_leader"
	// CodeNoQuorum (503) answers a request no quorum confirmed; see
	// ErrNoQuorum.
	CodeNoQuorum = "no_quorum"
	// CodeUnavailable (503) answers a request the node cannot serve now;
	// see ErrUnavailable.
	CodeUnavailable = "unavailable"
	// CodeRefused (409) answers a membership change or a restore that must
	// not be retried as it is; see ErrRefused.
	CodeRefused = "refused"
	// CodeInternal (500) answers an unexpected failure; see ErrInternal.
	CodeInternal = "internal"
	// CodeExhausted (409) answers a request the counter cannot serve
	// without going past the largest token; see ErrExhausted.
	CodeExhausted = "exhausted"
	// CodeUnauthenticated (401) answers a request without an identity; see
	// ErrUnauthenticated.
	CodeUnauthenticated = "unauthenticated"
	// CodeForbidden (403) answers a request whose identity lacks the role
	// the route needs; see ErrForbidden.
	CodeForbidden = "forbidden"
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

// Error returns the message the node answered.
func (e *APIError) Error() string { return e.Message }

// Unwrap returns the sentinel of e's code.
func (e *APIError) Unwrap() error { return CodeErr(e.Code) }

// Retryable reports whether the same request may succeed later.
func (e *APIError) Retryable() bool {
	switch e.Code {
	case CodeBadRequest, CodeRefused, CodeExhausted, CodeUnauthenticated, CodeForbidden:
		return false
	}
	return true
}

// CodeErr returns the sentinel error of an error code: ErrNotLeader for
// CodeNotLeader, and so on; ErrInternal for a code it does not know.
func CodeErr(code string) error {
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

// DecodeError turns a node's error answer, its HTTP status and body, into
// an *APIError. A body that is not an ErrorResponse with a code (a proxy's
// page, a truncated answer) becomes CodeUnavailable for 502, 503 and 504
// and CodeInternal otherwise, with the start of the body in the message.
func DecodeError(status int, body []byte) error {
	var e ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		code := CodeInternal
		if status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
			code = CodeUnavailable
		}
		return &APIError{Status: status, Code: code, Message: fmt.Sprintf("%v: HTTP %d: %.200s", CodeErr(code), status, body)}
	}
	return &APIError{Status: status, Code: e.Code, Message: e.Error, LeaderAPI: e.LeaderAPI, LeaderID: e.LeaderID}
}
