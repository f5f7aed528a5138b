package tokenservice

import (
	"errors"
	"net/http"

	"github.com/fencegate/fencegate/tokenclient"
)

// Errors of the server side only; the errors a client sees are defined in
// tokenclient (see client_compat.go).
var (
	// ErrBadPeers is returned by ParsePeers for a malformed peers list.
	ErrBadPeers = errors.New("tokenservice: bad peers")
	// ErrBadConfig is returned by Start for an invalid Config.
	ErrBadConfig = errors.New("tokenservice: bad configuration")
	// ErrExhausted is tokenclient.ErrExhausted, like the errors of
	// client_compat.go: the counter cannot hand out the tokens asked.
	ErrExhausted = tokenclient.ErrExhausted
)

// CodeExhausted is tokenclient.CodeExhausted (HTTP 409).
const CodeExhausted = tokenclient.CodeExhausted

func codeStatus(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeRefused, CodeExhausted:
		return http.StatusConflict
	case CodeNotLeader, CodeNoQuorum, CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}
