package proxy

import "errors"

// CodeProtocolViolation (08P01) closes a connection that sent bytes that are
// not a valid PostgreSQL frontend message in the current state. The
// fencegate codes (FG001 ...) are in package fencegate.
const CodeProtocolViolation = "08P01"

var (
	// ErrClosed is returned by Serve and Start once the proxy was closed.
	ErrClosed = errors.New("proxy: closed")
	// ErrNoUpstream is returned by Config.Validate and New when
	// Config.Upstream is empty.
	ErrNoUpstream = errors.New("proxy: no upstream configured")
	// ErrBadUpstream is returned by Config.Validate and New when
	// Config.Upstream, Config.AdminUpstream or Config.HealthUpstream
	// cannot be parsed.
	ErrBadUpstream = errors.New("proxy: bad upstream address")
	// ErrUpstreamTLS is returned to a session when the upstream refuses TLS
	// that the configured mode requires.
	ErrUpstreamTLS = errors.New("proxy: upstream refused TLS")
	// errProtocol marks a frontend protocol violation; the session answers
	// with SQLSTATE 08P01 and closes.
	errProtocol = errors.New("proxy: protocol violation")
	// errNotOurs: the repairer (Config.AdminUpstream) was asked to install
	// or repair schema fencegate in a database it must leave alone: a
	// template, a database that takes no connections, or one without the
	// schema other than the database the admin connection names. The
	// session is refused with SQLSTATE FG005, as when a repair fails.
	errNotOurs = errors.New("proxy: the proxy repairs only databases that hold schema fencegate, and installs it only into the database its admin connection names")
)
