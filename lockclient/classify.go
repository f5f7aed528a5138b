package lockclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// errBadReply is a reply of a type the lock protocol never expects.
var errBadReply = errors.New("unexpected reply type")

// classify says what kind of failure err, returned for a request to one
// Redis node, is.
func classify(err error) NodeErrorKind {
	var rerr redis.Error // an error reply of the server
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		switch {
		case strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "WRONGPASS"),
			strings.HasPrefix(msg, "ERR AUTH"), strings.Contains(msg, "invalid password"),
			strings.Contains(msg, "invalid username-password"):
			return NodeAuthFailed
		case strings.HasPrefix(msg, "NOPERM"):
			return NodeNotPermitted
		}
		return NodeBadAnswer
	}
	var (
		opErr     *net.OpError
		verify    *tls.CertificateVerificationError
		alert     tls.AlertError
		unknownCA x509.UnknownAuthorityError
		host      x509.HostnameError
		invalid   x509.CertificateInvalidError
		record    tls.RecordHeaderError
		netErr    net.Error
	)
	switch {
	case errors.As(err, &verify), errors.As(err, &alert), errors.As(err, &unknownCA),
		errors.As(err, &host), errors.As(err, &invalid), errors.Is(err, errNoClientCertificate):
		return NodeAuthFailed
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// The server ended the TLS handshake with an alert: about
		// certificates ("certificate required", "bad certificate",
		// "unknown certificate authority") it rejects the client's.
		if strings.Contains(opErr.Err.Error(), "certificate") || strings.Contains(opErr.Err.Error(), "access denied") {
			return NodeAuthFailed
		}
		return NodeBadAnswer
	case errors.As(err, &record):
		return NodeBadAnswer // a TLS client talking to a server that is not
	case errors.Is(err, errBadReply):
		return NodeBadAnswer
	case errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, redis.ErrClosed), errors.Is(err, net.ErrClosed):
		return NodeUnreachable
	case strings.HasPrefix(err.Error(), "redis: "):
		// go-redis's own protocol errors ("redis: can't parse ...",
		// "redis: invalid reply ..."): the node said something else.
		return NodeBadAnswer
	}
	return NodeUnreachable
}

// retryable reports whether another attempt may succeed where err failed
// on its node: the node could not be reached, or it answered that it is
// busy or still starting.
func retryable(ne *NodeError) bool {
	switch ne.Kind {
	case NodeUnreachable:
		return true
	case NodeBadAnswer:
		var rerr redis.Error
		if errors.As(ne.Err, &rerr) {
			msg := rerr.Error()
			for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN"} {
				if strings.HasPrefix(msg, p) {
					return true
				}
			}
		}
	}
	return false
}
