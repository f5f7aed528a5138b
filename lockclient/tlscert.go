package lockclient

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
)

// errNoClientCertificate marks a connection that a TLS server closed on
// its first exchange after asking for a client certificate that lockclient
// had none to give for. classify reports it as NodeAuthFailed.
var errNoClientCertificate = errors.New("the server asked for a TLS client certificate and none was configured " +
	"(set Certificates in the tls.Config given to WithRedisTLS)")

// certNoting returns a copy of cfg that notes in asked whether a server
// requested a client certificate that cfg had none to answer with. It
// chooses the certificate as crypto/tls does by itself (the caller's
// GetClientCertificate, else the first of Certificates the server
// accepts, else none).
func certNoting(cfg *tls.Config, asked *atomic.Bool) *tls.Config {
	c := cfg.Clone()
	own, certs := cfg.GetClientCertificate, cfg.Certificates
	c.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if own != nil {
			cert, err := own(cri)
			if err == nil && (cert == nil || len(cert.Certificate) == 0) {
				asked.Store(true)
			}
			return cert, err
		}
		for i := range certs {
			if cri.SupportsCertificate(&certs[i]) == nil {
				return &certs[i], nil
			}
		}
		asked.Store(true)
		return new(tls.Certificate), nil
	}
	return c
}

// certConn is a TLS connection that tells a refusal for want of a client
// certificate apart from a network failure. Under TLS 1.3 a server checks
// the client's certificate only after the client's handshake has finished,
// so its refusal reaches the client on the first read or write: as an
// alert, or, when the client's write meets the closed socket first, as a
// reset. A connection on which the server asked for a certificate none was
// given for, and that fails before it has read a byte, failed for that
// reason. (A server that only asks, tls-auth-clients optional, answers the
// first request, and later failures keep their own words.)
type certConn struct {
	*tls.Conn
	asked *atomic.Bool
	read  atomic.Bool
}

func (c *certConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.read.Store(true)
	}
	return n, c.explain(err)
}

func (c *certConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	return n, c.explain(err)
}

// NetConn returns the TCP connection under TLS, as tls.Conn does, for
// go-redis's look at whether the socket has data waiting.
func (c *certConn) NetConn() net.Conn { return c.Conn.NetConn() }

func (c *certConn) explain(err error) error {
	if err == nil || !c.asked.Load() || c.read.Load() {
		return err
	}
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) {
		return &certError{err: err}
	}
	return err
}

// certError is a first-exchange failure after an unanswered certificate
// request; it is errNoClientCertificate and keeps the socket's own error.
type certError struct{ err error }

func (e *certError) Error() string { return errNoClientCertificate.Error() + ": " + e.err.Error() }
func (e *certError) Unwrap() []error {
	return []error{errNoClientCertificate, e.err}
}
