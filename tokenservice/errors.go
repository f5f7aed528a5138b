package tokenservice

import (
	"errors"
	"net/http"

	"github.com/fencegate/fencegate/tokenapi"
)

// Errors of the server side only; the errors the service answers with are
// defined in package tokenapi, which the client shares.
var (
	// ErrBadPeers is returned by ParsePeers for a malformed peers list.
	ErrBadPeers = errors.New("tokenservice: bad peers")
	// ErrBadConfig is returned by Start for an invalid Config.
	ErrBadConfig = errors.New("tokenservice: bad configuration")
)

func codeStatus(code string) int {
	switch code {
	case tokenapi.CodeBadRequest:
		return http.StatusBadRequest
	case tokenapi.CodeRefused, tokenapi.CodeExhausted:
		return http.StatusConflict
	case tokenapi.CodeNotLeader, tokenapi.CodeNoQuorum, tokenapi.CodeUnavailable:
		return http.StatusServiceUnavailable
	case tokenapi.CodeUnauthenticated:
		return http.StatusUnauthorized
	case tokenapi.CodeForbidden:
		return http.StatusForbidden
	default:
		return http.StatusInternalServerError
	}
}
