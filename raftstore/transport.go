package raftstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// DialFunc opens a TCP connection to addr. Tests use it to route Raft
// traffic through fault-injecting relays; the default is a plain dial.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Layer is the network Raft runs on: it accepts the connections of peers
// and dials them (rqlite's store takes the same). The caller chooses the
// listener, and so the address (tests bind 127.0.0.1:0), and the security:
// NewTCPLayer for plain TCP on loopback, NewTLSLayer for mutual TLS.
type Layer interface {
	net.Listener
	// Dial connects to the peer whose Raft address is addr.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// NewTCPLayer returns a Layer of plain TCP: connections accepted on ln and
// dialled with dial (net.Dialer.DialContext when nil). Anyone who reaches
// ln can speak Raft to the node: use it on loopback only.
func NewTCPLayer(ln net.Listener, dial DialFunc) Layer {
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	return &tcpLayer{Listener: ln, dial: dial}
}

type tcpLayer struct {
	net.Listener
	dial DialFunc
}

func (l *tcpLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	return l.dial(ctx, "tcp", addr)
}

// TLSLayerOptions tune NewTLSLayer. Zero values take the defaults stated on
// each field.
type TLSLayerOptions struct {
	// HandshakeTimeout bounds the TLS handshake of a connection in either
	// direction; a peer that has not finished by then is dropped. The
	// default is 10s.
	HandshakeTimeout time.Duration
	// Logger receives one line per refused connection (at most one a
	// second, with a count of those left out). The default is
	// slog.Default().With("component", "raftstore").
	Logger *slog.Logger
	// Members binds the layer to the node's membership: a connection is
	// admitted only while its peer certificate's node (PeerID: the CN) is
	// in the configuration Members returns, checked after the handshake
	// and again on every RPC, so a node that left the configuration is
	// cut off at its next RPC; while Raft has not started, an accepted
	// connection waits for it (up to HandshakeTimeout). A dialled member's
	// address must answer with that member's certificate. nil admits every
	// peer the TLS configuration accepts (tests, tools). Whatever Members
	// is, every RPC must name the connection's node as its sender.
	Members MembersFunc
	// MaxPending bounds the accepted connections whose handshake and
	// admission have not finished (they hold a descriptor each until
	// HandshakeTimeout); a connection over the bound is closed at once and
	// counted as refused. The default is 256.
	MaxPending int
	// MaxPendingPerIP bounds those connections per source address, so a
	// stranger flooding the port from its own address cannot keep members
	// on other addresses out (at the total bound, the oldest pending
	// connection of the source holding the most is closed to make room);
	// one on a member's own address can still delay that member's
	// reconnect until its handshakes time out. The default is 64.
	MaxPendingPerIP int
}

// NewTLSLayer returns a Layer of mutual TLS over ln and dial (a plain TCP
// dial when nil). cfg holds this node's certificate (Certificates), the CA
// that signs peers (RootCAs and ClientCAs, both required) and usually a
// VerifyConnection that checks the peer's role; it is used in both
// directions:
//
//   - accepting, the peer must present a certificate that verifies against
//     ClientCAs (the layer requires it whatever cfg.ClientAuth says), and
//     the handshake completes before Raft sees the connection, so a
//     connection without one never reaches Raft;
//   - dialling, the peer's certificate must verify against RootCAs for the
//     host of the Raft address dialled (an IP or DNS subject alternative
//     name), so only the holder of that address's certificate can answer.
//
// An accepted connection speaks for the node its certificate names (its
// CN, see PeerID) and for no other: every RPC is read before Raft reads it
// and the connection is closed when the RPC's header names another sender
// (RPCHeader.ID, or another member's Raft address). With o.Members it also
// speaks only while that node is a member (see TLSLayerOptions.Members and
// DESIGN.md, "Who may speak Raft").
func NewTLSLayer(ln net.Listener, dial DialFunc, cfg *tls.Config, o TLSLayerOptions) (Layer, error) {
	switch {
	case cfg == nil:
		return nil, fmt.Errorf("%w: TLS layer without a TLS configuration", ErrBadConfig)
	case len(cfg.Certificates) == 0 && cfg.GetCertificate == nil:
		return nil, fmt.Errorf("%w: TLS layer without this node's certificate", ErrBadConfig)
	case cfg.RootCAs == nil || cfg.ClientCAs == nil:
		return nil, fmt.Errorf("%w: TLS layer without the cluster CA (RootCAs and ClientCAs)", ErrBadConfig)
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default().With("component", "raftstore")
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 256
	}
	if o.MaxPendingPerIP <= 0 {
		o.MaxPendingPerIP = 64
	}
	server := cfg.Clone()
	server.ClientAuth = tls.RequireAndVerifyClientCert
	server.MinVersion = max(server.MinVersion, tls.VersionTLS13)
	client := cfg.Clone()
	client.MinVersion = max(client.MinVersion, tls.VersionTLS13)
	ctx, cancel := context.WithCancel(context.Background())
	l := &tlsLayer{
		ln: ln, dial: dial, server: server, client: client, timeout: o.HandshakeTimeout, log: o.Logger, members: o.Members,
		conns: make(chan net.Conn), ctx: ctx, cancel: cancel,
		maxPending: o.MaxPending, maxPendingPerIP: o.MaxPendingPerIP, pendingByIP: make(map[string][]*pendingConn),
	}
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

type tlsLayer struct {
	ln             net.Listener
	dial           DialFunc
	server, client *tls.Config
	timeout        time.Duration
	log            *slog.Logger
	members        MembersFunc // nil: no membership check

	conns     chan net.Conn
	ctx       context.Context // cancelled by Close
	cancel    context.CancelFunc
	closeOnce sync.Once
	wg        sync.WaitGroup

	refusedMu   sync.Mutex
	lastRefusal time.Time
	suppressed  int

	pendingMu                   sync.Mutex
	maxPending, maxPendingPerIP int
	pending                     int                       // connections in handshake or admission
	pendingByIP                 map[string][]*pendingConn // the same, by source address, oldest first
}

// pendingConn is an accepted connection whose handshake or admission has
// not finished.
type pendingConn struct {
	c       net.Conn
	ip      string
	evicted bool // closed to make room, no longer counted
}

// errTooManyPending refuses a connection over the bounds on pending
// handshakes (TLSLayerOptions.MaxPending and MaxPendingPerIP).
var errTooManyPending = errors.New("raftstore: too many raft connections in handshake")

// sourceIP is the address a connection's pending count is kept under.
func sourceIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// reserve counts c as pending, or reports nil when its source is at its
// bound. At the total bound, the oldest pending connection of the source
// holding the most is closed to make room, when that source holds more
// than c's: a flood from a few addresses cannot keep a member on another
// address out.
func (l *tlsLayer) reserve(c net.Conn) *pendingConn {
	ip := sourceIP(c.RemoteAddr())
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	mine := len(l.pendingByIP[ip])
	if mine >= l.maxPendingPerIP {
		return nil
	}
	if l.pending >= l.maxPending {
		top := ""
		for k, v := range l.pendingByIP {
			if top == "" || len(v) > len(l.pendingByIP[top]) {
				top = k
			}
		}
		if top == "" || len(l.pendingByIP[top]) <= mine+1 {
			return nil
		}
		victim := l.pendingByIP[top][0]
		l.forget(victim)
		victim.evicted = true
		victim.c.Close()
	}
	p := &pendingConn{c: c, ip: ip}
	l.pending++
	l.pendingByIP[ip] = append(l.pendingByIP[ip], p)
	return p
}

// forget stops counting p; pendingMu is held.
func (l *tlsLayer) forget(p *pendingConn) {
	list := l.pendingByIP[p.ip]
	for i, q := range list {
		if q == p {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(l.pendingByIP, p.ip)
	} else {
		l.pendingByIP[p.ip] = list
	}
	l.pending--
}

// release ends what reserve counted.
func (l *tlsLayer) release(p *pendingConn) {
	l.pendingMu.Lock()
	defer l.pendingMu.Unlock()
	if !p.evicted {
		l.forget(p)
	}
}

// acceptLoop accepts connections and hands each one, once its handshake
// succeeded, to Accept. Each handshake runs in its own goroutine, so a peer
// that stalls in the middle of one holds up nobody else; the number of
// those goroutines, and so of descriptors held for unproven peers, is
// bounded in total and per source address (TLSLayerOptions.MaxPending).
// An accept error (EMFILE, ENFILE among them) backs off, up to a second,
// instead of spinning.
func (l *tlsLayer) acceptLoop() {
	defer l.wg.Done()
	delay := time.Duration(0)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if l.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			select {
			case <-time.After(delay):
				continue
			case <-l.ctx.Done():
				return
			}
		}
		delay = 0
		p := l.reserve(c)
		if p == nil {
			c.Close()
			l.refused(c.RemoteAddr(), errTooManyPending)
			continue
		}
		l.wg.Add(1)
		go l.handshake(c, p)
	}
}

func (l *tlsLayer) handshake(c net.Conn, p *pendingConn) {
	defer l.wg.Done()
	defer l.release(p)
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	defer cancel()
	tc := tls.Server(c, l.server)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		l.refused(c.RemoteAddr(), err)
		return
	}
	node := PeerID(tc.ConnectionState())
	if err := l.admit(node, l.timeout); err != nil {
		tc.Close()
		l.refused(c.RemoteAddr(), err)
		return
	}
	select {
	case l.conns <- newPeerConn(tc, node, l):
	case <-l.ctx.Done():
		tc.Close()
	}
}

// refused logs a refused connection, at most once a second.
func (l *tlsLayer) refused(from net.Addr, err error) {
	if l.ctx.Err() != nil {
		return
	}
	l.refusedMu.Lock()
	now := time.Now()
	if now.Sub(l.lastRefusal) < time.Second {
		l.suppressed++
		l.refusedMu.Unlock()
		return
	}
	n := l.suppressed
	l.lastRefusal, l.suppressed = now, 0
	l.refusedMu.Unlock()
	l.log.Warn("refused raft connection", "from", from.String(), "err", err, "refused_since_last_line", n)
}

func (l *tlsLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

func (l *tlsLayer) Close() error {
	var err error
	l.closeOnce.Do(func() {
		l.cancel()
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

func (l *tlsLayer) Addr() net.Addr { return l.ln.Addr() }

func (l *tlsLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial raft peer %s: %w", addr, err)
	}
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	c, err := l.dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	cfg := l.client.Clone()
	cfg.ServerName = host
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("tls handshake with raft peer %s: %w", addr, err)
	}
	if err := l.checkDialled(addr, tc); err != nil {
		tc.Close()
		return nil, err
	}
	return tc, nil
}

// raftLayer adapts a Layer to hashicorp/raft's StreamLayer.
type raftLayer struct{ Layer }

func (l raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.Layer.Dial(ctx, string(addr))
}

// Listen opens a TCP listener on addr for the use what names ("raft",
// "api") and turns "address in use" into ErrAddrInUse, with a message that
// says what to do.
func Listen(what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w: %s address %s is already in use; stop the process holding it or choose another address", ErrAddrInUse, what, addr)
		}
		return nil, fmt.Errorf("listen %s %s: %w", what, addr, err)
	}
	return ln, nil
}
