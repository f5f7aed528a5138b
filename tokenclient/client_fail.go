package tokenclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"syscall"
)

// nothingListens reports whether err says that no process accepts
// connections at the node's address: the connection was refused, or the
// host name does not exist. A timeout is not such an answer (the node may be
// slow or the network partitioned), and neither is any answer the node gave.
func nothingListens(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsNotFound
}

// failureKind names, in a word or two, why one node did not serve a
// request, so that a person reading the error tells a stopped node from an
// unreachable one, a TLS or credential problem, or a node that answered
// something the client could not use.
func failureKind(err error) string {
	var ae *APIError
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	var netErr net.Error
	switch {
	case err == nil:
		return "served"
	case errors.As(err, &ae):
		switch ae.Code {
		case CodeUnauthenticated, CodeForbidden:
			return "(authentication failed)"
		case CodeNoQuorum, CodeNotLeader:
			return "(answered: no leader)"
		}
		return "(answered " + ae.Code + ")"
	case errors.Is(err, ErrInternal):
		return "(bad answer)"
	case nothingListens(err):
		return "(refused: nothing listens)"
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &recordErr):
		return "(TLS failed)"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "(unreachable: timed out)"
	}
	return "(unreachable)"
}
