package tokenservice

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
)

// View streams: a leader's confirmation questions over kept connections,
// eight bytes each way and no HTTP per question.
//
// A confirmation round asks other voters for their raftstore.View. Asked
// as GET /v1/internal/view, each question cost the answering node a whole
// HTTP request (parsing, a goroutine per request to watch the connection,
// JSON) and the leader a round trip through the HTTP client's reader and
// writer goroutines: at one client about as much CPU as the token request
// itself. So the leader opens GET /v1/internal/view-stream with
// "Connection: Upgrade", through the same authentication and role checks
// as every peer route (with TLS: a peer certificate of this cluster, and
// the leader counts answers only from the certificate of the voter it
// asked); the node answers 101 and from then on the connection carries
// questions and answers:
//
//	question: seq uint64
//	answer:   seq uint64, term uint64, flags byte,
//	          len(node ID) uint16, node ID, len(leader ID) uint16, leader ID
//
// big-endian. The node reads its View after it read the question, so an
// answer, like the GET's, is read at a moment after the leader asked: the
// round's argument (raftstore/DESIGN.md, "Read index") is unchanged. A
// stream carries one question at a time; the leader keeps idle streams per
// voter and takes one per question, so a question never waits behind
// another and never gets another's answer (the sequence number is checked).
//
// Bounds: a stream ends after streamIdle without a question and after
// streamLife in all (flagLast on its last answer, so the leader does not
// reuse it); its node re-checks the caller then, as for any request. A node
// that does not know the route (an older version, in a rolling upgrade) is
// asked with GET for a minute before the stream is tried again.

// viewStreamProto is the Upgrade token of a view stream.
const viewStreamProto = "fencegate-view/1"

const (
	// streamLife bounds one stream: a peer's certificate and membership
	// are checked again when the leader opens the next one.
	streamLife = time.Minute
	// streamIdle closes a stream no question arrived on for this long;
	// the leader drops its idle streams after streamKeep, before that.
	streamIdle = 30 * time.Second
	streamKeep = 20 * time.Second
	// streamMaxIdle is how many idle streams the leader keeps per voter.
	streamMaxIdle = 4
	// flagLast marks the last answer of a stream.
	flagLast = 1
	// maxViewID bounds a node ID in an answer. An ID is never cut short
	// (a cut ID could read as another node's); a node whose view holds a
	// longer one ends the stream instead of answering.
	maxViewID = 1<<16 - 1
)

// errNoStream means the voter does not offer view streams.
var errNoStream = errors.New("no view stream")

// handleViewStream turns the connection into a view stream.
func (s *Server) handleViewStream(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), viewStreamProto) || !headerHasToken(r.Header, "Connection", "upgrade") {
		s.writeError(w, fmt.Errorf("%w: GET /v1/internal/view-stream needs the headers Connection: Upgrade and Upgrade: %s", tokenapi.ErrBadRequest, viewStreamProto))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		s.writeError(w, fmt.Errorf("%w: cannot take over the connection for a view stream: %v", tokenapi.ErrInternal, err))
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(s.bgCtx, func() { conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Time{}) // the http.Server's deadlines
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + viewStreamProto + "\r\n\r\n"); err != nil {
		return
	}
	if err := brw.Flush(); err != nil {
		return
	}
	s.serveViewStream(conn, brw.Reader)
}

// serveViewStream answers questions on conn until the stream ends.
func (s *Server) serveViewStream(conn net.Conn, br *bufio.Reader) {
	end := time.Now().Add(streamLife)
	var q [8]byte
	out := make([]byte, 0, 64)
	for {
		dl := time.Now().Add(streamIdle)
		if dl.After(end) {
			dl = end
		}
		_ = conn.SetReadDeadline(dl)
		if _, err := io.ReadFull(br, q[:]); err != nil {
			return
		}
		v := s.Store().View()
		if len(v.NodeID) > maxViewID || len(v.LeaderID) > maxViewID {
			return
		}
		last := time.Now().After(end)
		out = appendViewAnswer(out[:0], binary.BigEndian.Uint64(q[:]), v, last)
		_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := conn.Write(out); err != nil || last {
			return
		}
	}
}

// appendViewAnswer appends the answer to question seq; v's IDs are at most
// maxViewID bytes long.
func appendViewAnswer(b []byte, seq uint64, v raftstore.View, last bool) []byte {
	b = binary.BigEndian.AppendUint64(b, seq)
	b = binary.BigEndian.AppendUint64(b, v.Term)
	var flags byte
	if last {
		flags |= flagLast
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(len(v.NodeID)))
	b = append(b, v.NodeID...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(v.LeaderID)))
	return append(b, v.LeaderID...)
}

// readViewAnswer reads the answer to question seq from r, through buf
// (grown when an ID is longer); last reports flagLast.
func readViewAnswer(r io.Reader, seq uint64, buf []byte) (v raftstore.View, last bool, err error) {
	head := buf[:17]
	if _, err := io.ReadFull(r, head); err != nil {
		return v, false, err
	}
	if got := binary.BigEndian.Uint64(head); got != seq {
		return v, false, fmt.Errorf("answer %d to question %d", got, seq)
	}
	v.Term = binary.BigEndian.Uint64(head[8:])
	last = head[16]&flagLast != 0
	if v.NodeID, err = readViewID(r, buf); err == nil {
		v.LeaderID, err = readViewID(r, buf)
	}
	return v, last, err
}

// readViewID reads one length-prefixed ID of an answer.
func readViewID(r io.Reader, buf []byte) (string, error) {
	if _, err := io.ReadFull(r, buf[:2]); err != nil {
		return "", err
	}
	n := int(binary.BigEndian.Uint16(buf))
	if n > len(buf) {
		buf = make([]byte, n)
	}
	if _, err := io.ReadFull(r, buf[:n]); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// headerHasToken reports whether the comma-separated header name holds
// token (case-insensitive), as Connection: keep-alive, Upgrade does.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// viewStream is the leader's end of one stream.
type viewStream struct {
	rwc  io.ReadWriteCloser
	cn   string // the CN of the certificate the node presented ("" without TLS)
	seq  uint64
	used time.Time
	buf  [64]byte
}

// ask puts one question and reads its answer; ctx's end closes the stream.
func (st *viewStream) ask(ctx context.Context) (raftstore.View, bool, error) {
	stop := context.AfterFunc(ctx, func() { st.rwc.Close() })
	st.seq++
	var q [8]byte
	binary.BigEndian.PutUint64(q[:], st.seq)
	_, err := st.rwc.Write(q[:])
	var v raftstore.View
	var last bool
	if err == nil {
		v, last, err = readViewAnswer(st.rwc, st.seq, st.buf[:])
	}
	if !stop() {
		return raftstore.View{}, false, ctx.Err()
	}
	st.used = time.Now()
	return v, last, err
}

// viewStreams are a leader's idle streams, by view-stream URL, and the
// URLs whose node answered that it has no such route.
type viewStreams struct {
	mu     sync.Mutex
	idle   map[string][]*viewStream
	noneAt map[string]time.Time
}

// take returns an idle stream to u, or nil; reused streams older than
// streamKeep are closed.
func (p *viewStreams) take(u string) *viewStream {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := p.idle[u]; len(l) > 0; l = p.idle[u] {
		st := l[len(l)-1]
		p.idle[u] = l[:len(l)-1]
		if time.Since(st.used) < streamKeep {
			return st
		}
		st.rwc.Close()
	}
	return nil
}

// put keeps st for the next question to u.
func (p *viewStreams) put(u string, st *viewStream) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[string][]*viewStream{}
	}
	if len(p.idle[u]) >= streamMaxIdle || len(p.idle) > 64 {
		st.rwc.Close()
		return
	}
	p.idle[u] = append(p.idle[u], st)
}

// streamless reports whether u's node said lately that it has no streams.
func (p *viewStreams) streamless(u string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.noneAt[u]
	return ok && time.Since(at) < time.Minute
}

func (p *viewStreams) markStreamless(u string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.noneAt == nil || len(p.noneAt) > 64 {
		p.noneAt = map[string]time.Time{}
	}
	p.noneAt[u] = time.Now()
}

// closeAll closes every idle stream.
func (p *viewStreams) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.idle {
		for _, st := range l {
			st.rwc.Close()
		}
	}
	p.idle = nil
}

// openStream opens a view stream to the view-stream URL u.
func (c *viewConfirmer) openStream(ctx context.Context, u string) (*viewStream, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", viewStreamProto)
	resp, err := c.s.probe.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", tokenapi.ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return nil, errNoStream
		}
		return nil, tokenapi.DecodeError(resp.StatusCode, body)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok || !strings.EqualFold(resp.Header.Get("Upgrade"), viewStreamProto) {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s switched to %q, not %s", tokenapi.ErrUnavailable, u, resp.Header.Get("Upgrade"), viewStreamProto)
	}
	st := &viewStream{rwc: rwc, used: time.Now()}
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		st.cn = resp.TLS.PeerCertificates[0].Subject.CommonName
	} else if c.s.probe.verify {
		rwc.Close()
		return nil, fmt.Errorf("%w: %s answered without TLS; refused", tokenapi.ErrUnavailable, u)
	}
	return st, nil
}

// streamView asks voter v over a view stream to the view-stream URL u. A
// kept stream that fails before its answer (the node closed it) is
// replaced once by a new one. errNoStream means v's node has none.
func (c *viewConfirmer) streamView(ctx context.Context, v tokenapi.Peer, u string) (raftstore.View, error) {
	for attempt := 0; ; attempt++ {
		st := c.streams.take(u)
		kept := st != nil
		if !kept {
			var err error
			if st, err = c.openStream(ctx, u); err != nil {
				if errors.Is(err, errNoStream) {
					c.streams.markStreamless(u)
				}
				return raftstore.View{}, err
			}
		}
		if c.s.probe.verify && st.cn != v.ID {
			st.rwc.Close()
			return raftstore.View{}, fmt.Errorf("%w: the node at %s answered as %q, not as voter %s; refused", tokenapi.ErrUnavailable, v.APIAddr, st.cn, v.ID)
		}
		view, last, err := st.ask(ctx)
		if err == nil {
			if last {
				st.rwc.Close()
			} else {
				c.streams.put(u, st)
			}
			return view, nil
		}
		st.rwc.Close()
		if !kept || attempt > 0 || ctx.Err() != nil {
			return raftstore.View{}, fmt.Errorf("%w: view stream to %s: %w", tokenapi.ErrUnavailable, v.APIAddr, err)
		}
	}
}
