package tokenservice

import (
	"errors"
	"net/http"
)

// Errors of the server side only; the errors a client sees are defined in
// tokenclient (see client_compat.go).
var (
	// ErrBadPeers is returned by ParsePeers for a malformed peers list.
	ErrBadPeers = errors.New("tokenservice: bad peers")
	// ErrBadConfig is returned by Start for an invalid Config.
	ErrBadConfig = errors.New("tokenservice: bad configuration")
)

func codeStatus(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeRefused:
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
