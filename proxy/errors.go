package proxy

import "errors"

// SQLSTATE codes the proxy and the fencegate schema raise. They use the
// "FG" class, which PostgreSQL itself never emits.
const (
	// CodeStaleToken (FG001): the offered token is lower than the last one
	// accepted for the resource. The transaction is aborted.
	CodeStaleToken = "FG001"
	// CodeUnfenced (FG002): the transaction tried to write without taking a
	// fence while fences are required. The transaction is aborted.
	CodeUnfenced = "FG002"
	// CodeMisuse (FG003): fencegate.fence was used in a way that protects
	// nothing: alone in autocommit, not first in its transaction, with a
	// NULL or negative token or an empty resource.
	CodeMisuse = "FG003"
	// CodeProtocolViolation (08P01) closes a connection that sent bytes
	// that are not a valid PostgreSQL frontend message in the current state.
	CodeProtocolViolation = "08P01"
)

var (
	// ErrClosed is returned by Serve and Start once the proxy was closed.
	ErrClosed = errors.New("proxy: closed")
	// ErrNoUpstream is returned by New when Config.Upstream is empty.
	ErrNoUpstream = errors.New("proxy: no upstream configured")
	// ErrBadUpstream is returned by New when Config.Upstream cannot be parsed.
	ErrBadUpstream = errors.New("proxy: bad upstream address")
	// ErrUpstreamTLS is returned to a session when the upstream refuses TLS
	// that the configured mode requires.
	ErrUpstreamTLS = errors.New("proxy: upstream refused TLS")
	// errProtocol marks a frontend protocol violation; the session answers
	// with SQLSTATE 08P01 and closes.
	errProtocol = errors.New("proxy: protocol violation")
)
