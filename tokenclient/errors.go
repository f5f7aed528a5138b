package tokenclient

import (
	"errors"
	"fmt"

	"github.com/fencegate/fencegate/tokenapi"
)

// The errors of the client itself. The errors a node answers with (an
// *tokenapi.APIError, which unwraps to tokenapi.ErrNoQuorum and the other
// sentinels) and those of reading TLS and credentials files
// (tokenapi.ErrBadTLS, tokenapi.ErrBadCredentials) are defined in package
// tokenapi, which the server shares.
var (
	// ErrNotRunning means that no node accepted a connection at all, twice
	// over every URL the client knows: nothing listens there (or the host
	// does not exist). It wraps tokenapi.ErrUnavailable. The client returns
	// it at once instead of retrying until its deadline.
	ErrNotRunning = fmt.Errorf("%w: no token service node is running", tokenapi.ErrUnavailable)
	// ErrNoServers is returned by NewClient without server addresses.
	ErrNoServers = errors.New("tokenservice: no servers given")
)
