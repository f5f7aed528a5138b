package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// errUpstreamRefused: the upstream sent an ErrorResponse during startup
// (bad password, unknown database, ...); it was relayed to the client.
var errUpstreamRefused = errors.New("proxy: upstream refused the session")

// session is one client connection and its upstream connection. After the
// startup phase two goroutines pump messages: the frontend pump (client to
// upstream, this session's own goroutine) and the backend pump (upstream
// to client). The frontend pump alone writes upstream; the backend pump
// alone writes to the client, except for a final error written after the
// backend pump ended.
type session struct {
	p   *Proxy
	id  uint64
	log *slog.Logger

	client    net.Conn
	up        net.Conn
	clientTLS bool
	// clientWriter and upstreamWriter buffer what is written to the client
	// and to the upstream; clientFrames and upstreamFrames read the
	// messages each sends.
	clientWriter, upstreamWriter *bufio.Writer
	clientFrames, upstreamFrames frameReader
	// clientRef and upstreamRef are the connections under the writers:
	// a batch that empties its reader's buffer, with nothing in the
	// writer before it, is written straight from the read buffer (see
	// sendBatch).
	clientRef, upstreamRef *connRef

	// user and database are what the StartupMessage asked for (the
	// database defaulted as the server does); role is the role the server
	// authenticated, from its session_authorization ParameterStatus (""
	// when it sent none). Admission decisions rest on role.
	user, database, role string
	// params holds the value of each parameter the server reported during
	// startup: what the client was told (see forwardParams), and the
	// server_version the gate checks (see checkServerVersion).
	params map[string]string
	// upPID and upSecret are the upstream's BackendKeyData; the client got
	// upPID and secret, the proxy's own (keySet once registered).
	upPID       uint32
	upSecret    []byte
	secret      []byte
	keySet      bool
	startStatus byte // the upstream's ReadyForQuery at the end of startup

	track tracker // requests in flight, shared by the pumps
	// stallTimer runs checkStalled (with Config.IdleInTransactionTimeout).
	stallTimer *time.Timer
	// clientIO counts the pumps' reads from and writes to the client, with
	// the limit on (see clientwait.go).
	clientIO *clientIO

	closeMu     sync.Mutex
	closeReason error // first reason the session is closing
	ready       bool  // past startup, pumps running
	backendDone chan struct{}
}

func newSession(p *Proxy, c net.Conn) *session {
	id := p.nextID.Add(1)
	return &session{
		p: p, id: id, client: c,
		log:         p.log.With("session", id, "client", c.RemoteAddr().String()),
		backendDone: make(chan struct{}),
	}
}

// setClosing records why the session ends and closes both connections. The
// first reason wins. It reports whether this call set the reason.
func (s *session) setClosing(reason error) bool {
	s.closeMu.Lock()
	first := s.closeReason == nil
	if first {
		s.closeReason = reason
	}
	s.closeMu.Unlock()
	return first
}

func (s *session) reason() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	return s.closeReason
}

var (
	errStalled     = errors.New("proxy: idle in a transaction for too long")
	errKilled      = errors.New("proxy: session closed by the proxy")
	errDraining    = errors.New("proxy: shutting down")
	errClientGone  = errors.New("proxy: client went away")
	errStalledLost = errors.New("proxy: quiet in a transaction for too long, in a session the request tracker lost")
	errStalledWait = errors.New("proxy: waited on the client in a transaction for too long")
)

// kill closes the session's connections at once.
func (s *session) kill() {
	s.setClosing(errKilled)
	s.closeMu.Lock()
	client, up := s.client, s.up
	s.closeMu.Unlock()
	client.Close()
	if up != nil {
		up.Close()
	}
}

// checkStalled closes the session when it has been idle in a transaction
// for Config.IdleInTransactionTimeout, or checks again when it would reach
// it. The backend pump resets the timer at every ReadyForQuery of a
// transaction, and tells the client.
func (s *session) checkStalled() {
	wait := s.track.closeIfStalled(func(lost bool) {
		if lost && s.track.stalledOnClient != "" {
			s.setClosing(errStalledWait)
		} else if lost {
			s.setClosing(errStalledLost)
		} else {
			s.setClosing(errStalled)
		}
	})
	if wait > 0 {
		s.stallTimer.Reset(wait)
		return
	}
	switch r := s.reason(); {
	case errors.Is(r, errStalled):
		s.log.Info("session idle in a transaction past the limit; closed", "limit", s.p.cfg.IdleInTransactionTimeout.String())
		s.up.Close()
		// A client that does not read must not keep the session's
		// goroutines waiting to write to it.
		_ = s.client.SetWriteDeadline(time.Now().Add(time.Second))
	case errors.Is(r, errStalledWait):
		s.log.Warn("session waited on its client in a transaction past the limit; closed without an answer",
			"limit", s.p.cfg.IdleInTransactionTimeout.String(), "blocked", s.track.stalledOn())
		s.up.Close()
		s.client.Close()
	case errors.Is(r, errStalledLost):
		// No FATAL: the proxy cannot tell whether a request is in flight.
		s.log.Warn("session the proxy could not follow, quiet in a transaction past the limit; closed without an answer", "limit", s.p.cfg.IdleInTransactionTimeout.String())
		s.up.Close()
	}
}

// drainIfIdle closes the session if the server has answered every request
// and no transaction is open (see tracker.idle). The backend pump then tells
// the client the proxy is shutting down.
func (s *session) drainIfIdle() {
	s.closeMu.Lock()
	up, ready := s.up, s.ready
	s.closeMu.Unlock()
	if !ready || !s.track.closeIfIdle() {
		return
	}
	if s.setClosing(errDraining) {
		up.Close()
	}
}

func (s *session) run() {
	m := s.p.metrics
	m.Connections.Inc()
	m.ConnectionsTotal.Inc()
	defer func() {
		s.client.Close()
		if s.up != nil {
			s.up.Close()
		}
		m.Connections.Dec()
		s.p.removeSession(s)
	}()
	_ = s.client.SetDeadline(time.Now().Add(startupTimeout))
	c, sp, err := s.negotiate()
	s.closeMu.Lock()
	s.client = c
	s.closeMu.Unlock()
	if err != nil {
		s.startupFailed(err)
		return
	}
	if sp == nil { // cancel request
		return
	}
	if s.p.cfg.RequireClientTLS && !s.clientTLS {
		s.startupFailed(fmt.Errorf("%w: this proxy accepts TLS connections only (use sslmode=require)", errTLSRequired))
		return
	}
	s.user, s.database = sp.get("user"), sp.database()
	s.log = s.log.With("user", s.user, "database", s.database)
	if sp.wantsReplication() {
		// A walsender speaks a protocol of its own (physical: not SQL at
		// all, BASE_BACKUP copies every file), and applications do not
		// replicate through a gate.
		s.log.Info("replication connection refused", "replication", sp.get("replication"))
		s.writeFatalRaw("0A000", "fencegate: the proxy does not carry replication connections; connect to PostgreSQL directly")
		return
	}
	max := s.p.cfg.MaxMessageSize
	var cref, uref *connRef
	s.clientWriter, s.clientFrames, cref = newBuffered(c, max)
	s.clientRef = cref
	up, err := s.p.dialUpstream(context.Background())
	if err != nil {
		s.log.Warn("upstream unavailable", "err", err)
		s.writeFatal("08006", "fencegate: cannot reach the upstream PostgreSQL server: "+err.Error())
		return
	}
	s.closeMu.Lock()
	s.up = up
	killed := s.closeReason != nil
	s.closeMu.Unlock()
	if killed {
		return
	}
	_ = up.SetDeadline(time.Now().Add(startupTimeout))
	s.upstreamWriter, s.upstreamFrames, uref = newBuffered(up, 1<<30)
	s.upstreamRef = uref
	if err := s.upstreamStartup(sp); err != nil {
		if !errors.Is(err, errUpstreamRefused) {
			s.startupFailed(err)
		}
		return
	}
	if s.role != s.user {
		s.log = s.log.With("role", s.role) // as the server authenticated it
	}
	// What the client has so far (authentication, parameters, its cancel
	// key) goes out before the gate runs, so that it can cancel the check.
	if err := s.clientWriter.Flush(); err != nil {
		return
	}
	status, err := s.gate()
	if err != nil {
		s.refuse(err)
		return
	}
	if err := writeMsg(s.clientWriter, 'Z', []byte{status}); err != nil {
		return
	}
	if err := s.clientWriter.Flush(); err != nil {
		return
	}
	_ = s.client.SetDeadline(time.Time{})
	_ = up.SetDeadline(time.Time{})
	s.track.init(status)
	if d := s.p.cfg.IdleInTransactionTimeout; d > 0 {
		s.track.stallLimit = d
		s.track.readyAt = s.track.now()
		s.clientIO = &clientIO{}
		s.track.io = s.clientIO
		s.stallTimer = time.AfterFunc(d, s.checkStalled)
		defer s.stallTimer.Stop()
	}
	s.closeMu.Lock()
	s.ready = true // the pumps run: drainIfIdle may now close the session
	killed = s.closeReason != nil
	if !killed {
		// The pumps read and write with raw system calls (see rawio.go).
		cref.Conn, uref.Conn = newRawConn(s.client), newRawConn(s.up)
		s.watchClient(cref)
	}
	s.closeMu.Unlock()
	if killed {
		return
	}
	go s.backendPump()
	if s.p.draining.Load() {
		s.drainIfIdle() // shutdown began while this session started
	}
	err = s.frontendPump()
	s.endFrontend(err)
}

var errTLSRequired = errors.New("proxy: TLS required")

// startupFailed answers a failed startup with an ErrorResponse when the
// connection still works.
func (s *session) startupFailed(err error) {
	switch {
	case errors.Is(err, errProtocol):
		s.p.metrics.ProtocolErrors.Inc()
		s.log.Warn("protocol violation during startup", "err", err)
		s.writeFatalRaw(CodeProtocolViolation, "fencegate: invalid startup: "+err.Error())
	case errors.Is(err, errTLSRequired):
		s.writeFatalRaw("28000", "fencegate: "+err.Error())
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		s.log.Debug("client left during startup", "err", err)
	default:
		s.log.Info("startup failed", "err", err)
		s.writeFatalRaw("08006", "fencegate: startup failed: "+err.Error())
	}
}

// writeFatalRaw writes a FATAL ErrorResponse straight to the client
// connection (before the buffered writer exists, or after the pumps ended).
func (s *session) writeFatalRaw(code, msg string) {
	_ = s.client.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = s.client.Write(appendMsg(nil, 'E', errorBody("FATAL", code, msg, "")))
}

// writeFatal writes a FATAL ErrorResponse through the buffered writer.
func (s *session) writeFatal(code, msg string) {
	_ = s.client.SetWriteDeadline(time.Now().Add(time.Second))
	_ = writeMsg(s.clientWriter, 'E', errorBody("FATAL", code, msg, ""))
	_ = s.clientWriter.Flush()
}

// endFrontend runs when the frontend pump returns: it stops the backend
// pump and, for a protocol violation, tells the client why.
func (s *session) endFrontend(err error) {
	var reason error
	switch {
	case err == nil:
		reason = errClientGone // Terminate
	case errors.Is(err, errProtocol):
		reason = err
	case errors.Is(err, errDraining):
		reason = errDraining // the backend pump says goodbye
	default:
		reason = errClientGone
	}
	if s.setClosing(reason) || err == nil {
		s.up.Close() // on Terminate the frontend pump set the reason
	}
	<-s.backendDone
	if errors.Is(s.reason(), errProtocol) {
		s.p.metrics.ProtocolErrors.Inc()
		s.log.Warn("protocol violation; closing the connection", "err", err)
		s.writeFatal(CodeProtocolViolation, "fencegate: "+err.Error())
	}
}

// endBackend closes the session from the backend pump's side.
func (s *session) endBackend(err error) {
	defer close(s.backendDone)
	defer s.track.end() // a frontend pump pushed back stops waiting
	first := s.setClosing(err)
	if !first {
		switch r := s.reason(); {
		case errors.Is(r, errProtocol):
			// The frontend pump writes the error and closes.
			return
		case r == errDraining:
			s.writeFatal("57P01", "fencegate: the proxy is shutting down")
		case r == errStalled:
			s.writeFatal("25P03", fmt.Sprintf("fencegate: terminating the session: it was idle in a transaction for longer than the proxy's limit (%s); the transaction was rolled back",
				s.p.cfg.IdleInTransactionTimeout))
		}
		s.client.Close()
		return
	}
	if err != nil {
		// Nothing may be said on the server's behalf while a request is in
		// flight: a COMMIT may have committed before the link broke, and an
		// error with a SQLSTATE reads as PostgreSQL's answer to it ("not
		// committed"). The client then sees what a broken link straight to
		// the server shows: the connection closed, the outcome unknown.
		if s.track.closeOnLoss() {
			s.log.Warn("upstream connection lost", "err", err)
			s.writeFatal("08006", "fencegate: lost the connection to the upstream PostgreSQL server: "+err.Error())
		} else {
			s.log.Warn("upstream connection lost with a request in flight; closing the client's connection without an answer", "err", err)
		}
	}
	s.client.Close()
}
