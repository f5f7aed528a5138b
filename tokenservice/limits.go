package tokenservice

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
)

// What a caller without an identity can hold, and how the node bounds it:
//
//   - time: http.Server timeouts (Config.ReadHeaderTimeout covers the TLS
//     handshake and the first header, ReadTimeout a whole request with its
//     body, WriteTimeout the answer, IdleTimeout a kept-alive connection);
//   - memory: headers capped at Config.MaxHeaderBytes and bodies at maxBody
//     before authentication runs;
//   - connections: a cap in total (Config.MaxConns) and per source IP
//     (Config.MaxConnsPerIP), enforced by connLimiter under the TLS layer.
//     At a cap, or when the process is out of file descriptors, the oldest
//     connection that has not authenticated is closed to make room, so a
//     stranger holding idle connections never keeps an authorised client
//     out; a connection whose request was refused (401, 403) is closed after
//     the answer.

// connLimiter wraps the API's plain TCP listener: it caps connections in
// total and per source IP, evicting the oldest unauthenticated connection
// at a cap or when accept runs out of file descriptors.
type connLimiter struct {
	net.Listener
	max, perIP int
	log        *slog.Logger

	mu sync.Mutex
	// unauth holds the connections not yet authenticated, oldest first;
	// authed the others. Each element's Value is a *limitedConn.
	unauth, authed *list.List
	byIP           map[string]*ipConns
	evicted        atomic.Uint64
}

// ipConns are the connections of one source IP.
type ipConns struct {
	n      int
	unauth *list.List // oldest first; Value is *limitedConn
}

func newConnLimiter(ln net.Listener, max, perIP int, log *slog.Logger) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perIP: perIP, log: log,
		unauth: list.New(), authed: list.New(), byIP: map[string]*ipConns{}}
}

// limitedConn is one accepted connection, tracked until closed.
type limitedConn struct {
	net.Conn
	l      *connLimiter
	ip     string
	elem   *list.Element // in l.unauth or l.authed
	ipElem *list.Element // in l.byIP[ip].unauth while unauthenticated
	authed bool
	closed bool
}

// Accept returns the next connection within the caps. At the total or the
// source's cap it first closes the oldest unauthenticated connection (of
// that source, for its cap); when there is none, it closes the new one and
// waits for the next. Out of file descriptors, it closes the oldest
// unauthenticated connection and accepts again.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				if victim := l.evictOldest(); victim != nil {
					victim.Conn.Close()
					continue
				}
			}
			return nil, err
		}
		ip := ""
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			ip = a.IP.String()
		} else {
			ip = c.RemoteAddr().String()
		}
		lc, victims, ok := l.admit(c, ip)
		for _, v := range victims {
			v.Conn.Close()
		}
		if !ok {
			l.log.Debug("api connection refused: every connection at the cap is authenticated", "from", c.RemoteAddr())
			c.Close()
			continue
		}
		return lc, nil
	}
}

// admit registers c, choosing the connections to close to make room (the
// caller closes them outside the lock); false when there is no room.
func (l *connLimiter) admit(c net.Conn, ip string) (*limitedConn, []*limitedConn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var victims []*limitedConn
	ic := l.byIP[ip]
	if ic != nil && ic.n >= l.perIP {
		v := l.evictOldestLocked(ic)
		if v == nil {
			return nil, nil, false
		}
		victims = append(victims, v)
	}
	if l.unauth.Len()+l.authed.Len() >= l.max {
		v := l.evictOldestLocked(nil)
		if v == nil {
			return nil, victims, false
		}
		victims = append(victims, v)
	}
	if ic = l.byIP[ip]; ic == nil {
		ic = &ipConns{unauth: list.New()}
		l.byIP[ip] = ic
	}
	lc := &limitedConn{Conn: c, l: l, ip: ip}
	lc.elem = l.unauth.PushBack(lc)
	lc.ipElem = ic.unauth.PushBack(lc)
	ic.n++
	return lc, victims, true
}

// evictOldest forgets the oldest unauthenticated connection and returns it
// for the caller to close; nil when there is none.
func (l *connLimiter) evictOldest() *limitedConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.evictOldestLocked(nil)
}

// evictOldestLocked is evictOldest with l.mu held, among the connections of
// ic when given.
func (l *connLimiter) evictOldestLocked(ic *ipConns) *limitedConn {
	var e *list.Element
	if ic != nil {
		e = ic.unauth.Front()
	} else {
		e = l.unauth.Front()
	}
	if e == nil {
		return nil
	}
	v := e.Value.(*limitedConn)
	l.forgetLocked(v)
	l.evicted.Add(1)
	return v
}

// forgetLocked removes c from the limiter's books.
func (l *connLimiter) forgetLocked(c *limitedConn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.authed {
		l.authed.Remove(c.elem)
	} else {
		l.unauth.Remove(c.elem)
	}
	ic := l.byIP[c.ip]
	if c.ipElem != nil {
		ic.unauth.Remove(c.ipElem)
		c.ipElem = nil
	}
	if ic.n--; ic.n == 0 {
		delete(l.byIP, c.ip)
	}
}

// markAuthenticated moves c out of the connections a cap may evict.
func (c *limitedConn) markAuthenticated() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.closed || c.authed {
		return
	}
	l.unauth.Remove(c.elem)
	c.elem = l.authed.PushBack(c)
	c.authed = true
	l.byIP[c.ip].unauth.Remove(c.ipElem)
	c.ipElem = nil
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.forgetLocked(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// open returns the connections open now and how many of them authenticated.
func (l *connLimiter) open() (total, authed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.unauth.Len() + l.authed.Len(), l.authed.Len()
}

type connKey struct{}

// connContext records a request's connection in its context, so that the
// handler chain can mark it authenticated (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// limitedOf returns the limiter's connection under c (c itself, or under a
// TLS connection), nil if there is none.
func limitedOf(c net.Conn) *limitedConn {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, _ := c.(*limitedConn)
	return lc
}

// markAuthenticated marks the connection of the request whose context ctx
// is as authenticated.
func markAuthenticated(ctx context.Context) {
	if c, ok := ctx.Value(connKey{}).(net.Conn); ok {
		if lc := limitedOf(c); lc != nil {
			lc.markAuthenticated()
		}
	}
}

// connState marks a TLS connection authenticated as soon as its first
// request starts, after the handshake, when it presented a client
// certificate of the cluster CA (http.Server.ConnState).
func connState(c net.Conn, st http.ConnState) {
	if st != http.StateActive {
		return
	}
	tc, ok := c.(*tls.Conn)
	if !ok {
		return
	}
	if cs := tc.ConnectionState(); len(cs.VerifiedChains) > 0 {
		if lc := limitedOf(c); lc != nil {
			lc.markAuthenticated()
		}
	}
}

// limitRequests caps every request body at maxBody before anything reads
// it, authentication included, and closes the connection after an answer
// that refuses the caller (401, 403), so a refused caller holds no
// kept-alive connection.
func (s *Server) limitRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next.ServeHTTP(&refusalCloser{ResponseWriter: w}, r)
	})
}

// refusalCloser adds "Connection: close" to a 401 or 403 answer.
type refusalCloser struct{ http.ResponseWriter }

func (w *refusalCloser) WriteHeader(code int) {
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *refusalCloser) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// fileLimit returns the process's soft limit on open file descriptors.
func fileLimit() (uint64, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 {
		return 0, false
	}
	return uint64(rl.Cur), true
}
