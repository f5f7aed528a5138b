package proxy

import (
	"encoding/binary"
	"fmt"
)

// frontendPump forwards client messages upstream, unchanged, until the
// client leaves (nil error on Terminate), breaks the protocol, or the
// session closes. It reads no SQL: besides the framing it looks at the
// type byte of each message and, for the extended-protocol messages, the
// statement and portal names at their start, for the request tracker.
func (s *session) frontendPump() error {
	t := &s.track
	for {
		if s.clientFrames.r.Buffered() == 0 {
			if err := s.upstreamWriter.Flush(); err != nil {
				return err
			}
			// One read takes everything the socket holds; the batch
			// below then handles every whole message of it.
			if _, err := s.clientFrames.r.Peek(5); err != nil {
				return err
			}
		}
		if moved, err := s.frontendBatch(); err != nil {
			return err
		} else if moved {
			continue
		}
		// One message the batch leaves alone: Terminate, one not yet
		// whole in the buffer, or one the checks below refuse.
		typ, n, err := s.clientFrames.peekHeader()
		if err != nil {
			return err
		}
		r := request{typ: typ}
		switch typ {
		case 'Q', 'E':
			r.at = t.now()
			if typ == 'E' {
				r.name = s.peekName(n, 0)
			}
		case 'P':
			r.name = s.peekName(n, 0)
		case 'B':
			r.name, r.stmt = s.peekName(n, 0), s.peekName(n, 1)
		case 'C', 'D':
			if r.sub, r.name, err = s.peekTarget(n); err != nil {
				return err
			}
		case 'S', 'F', 'c', 'f':
		case 'H', 'd':
			if err := s.clientFrames.copyTo(s.upstreamWriter, n); err != nil {
				return err
			}
			continue
		case 'X':
			// The client leaves. Say so before the server reads the
			// Terminate and closes: the backend pump, seeing that close,
			// then knows it is no lost server to report (and the client,
			// which is closing, gets no FATAL 08006 it would raise as an
			// error).
			s.setClosing(errClientGone)
			_ = s.clientFrames.copyTo(s.upstreamWriter, n)
			_ = s.upstreamWriter.Flush()
			return nil
		default:
			return fmt.Errorf("%w: unexpected frontend message type %q", errProtocol, typ)
		}
		streamed, err := s.awaitWhole(n)
		if err != nil {
			return err
		}
		pr := t.push(r)
		if pr == refused {
			return errDraining
		}
		if streamed {
			t.setReceiving(true)
		}
		if err := s.clientFrames.copyTo(s.upstreamWriter, n); err != nil {
			return err
		}
		if streamed {
			t.setReceiving(false)
		}
		if pr == pushedFull {
			// Push back: read nothing more from the client until the
			// server has answered some of what it sent.
			if err := s.upstreamWriter.Flush(); err != nil {
				return err
			}
			if !t.waitRoom() {
				return errDraining
			}
		}
	}
}

// peekLimit bounds how much of a message is looked at for names.
const peekLimit = 1 << 10

// peekName returns the hash of the i-th NUL-terminated string (0 or 1) at
// the start of the next message's body (length n), without consuming it. A
// name longer than peekLimit is hashed by its first bytes.
func (s *session) peekName(n, i int) uint64 {
	b, _ := s.clientFrames.r.Peek(5 + min(n, peekLimit))
	if len(b) < 5 {
		return 0
	}
	b = b[5:]
	for {
		name, rest, ok := cstring(b)
		if !ok {
			return nameHash(b)
		}
		if i == 0 {
			return nameHash(name)
		}
		i--
		b = rest
	}
}

// peekTarget reads the 'S' or 'P' and the name of a Close or Describe.
func (s *session) peekTarget(n int) (byte, uint64, error) {
	b, _ := s.clientFrames.r.Peek(5 + min(n, peekLimit))
	if len(b) < 6 || (b[5] != 'S' && b[5] != 'P') {
		return 0, 0, fmt.Errorf("%w: malformed %c message", errProtocol, b[0])
	}
	name, _, ok := cstring(b[6:])
	if !ok {
		name = b[6:]
	}
	return b[5], nameHash(name), nil
}

// frontendBatch handles every whole message at the front of the client
// reader's buffer that the per-message path would forward, recording them
// in the request tracker under one lock and copying them to the upstream
// writer in one piece. It reports whether it consumed anything. It stops
// before a message the per-message path must judge (Terminate, an unknown
// type, a malformed Close or Describe, a bad header, a message not whole in
// the buffer), after a message that filled the tracker (the pump flushes
// and waits for room), and when the tracker refuses a message because the
// session is closing (errDraining: what came before it is not flushed).
func (s *session) frontendBatch() (bool, error) {
	r := s.clientFrames.r
	buf, _ := r.Peek(r.Buffered())
	t := &s.track
	off, full, refuse := 0, false, false
	var now int64 = -1
	t.mu.Lock()
	for !full && len(buf)-off >= 5 {
		typ := buf[off]
		n := int(int32(binary.BigEndian.Uint32(buf[off+1:]))) - 4
		if n < 0 || n > s.clientFrames.max-4 || len(buf)-off-5 < n {
			break
		}
		body := buf[off+5 : off+5+n]
		head := body[:min(n, peekLimit)]
		rq := request{typ: typ}
		switch typ {
		case 'Q', 'E':
			if now < 0 {
				now = t.now()
			}
			rq.at = now
			if typ == 'E' {
				rq.name = nameAt(head, 0)
			}
		case 'P':
			rq.name = nameAt(head, 0)
		case 'B':
			rq.name, rq.stmt = nameAt(head, 0), nameAt(head, 1)
		case 'C', 'D':
			if len(head) < 1 || (head[0] != 'S' && head[0] != 'P') {
				goto done
			}
			rq.sub = head[0]
			name, _, ok := cstring(head[1:])
			if !ok {
				name = head[1:]
			}
			rq.name = nameHash(name)
		case 'S', 'F', 'c', 'f':
		case 'H', 'd':
			off += 5 + n
			continue
		default:
			goto done
		}
		switch t.pushLocked(rq) {
		case refused:
			refuse = true
			goto done
		case pushedFull:
			full = true
		}
		off += 5 + n
	}
done:
	t.mu.Unlock()
	if off > 0 {
		if err := sendBatch(s.upstreamWriter, s.upstreamRef, buf[:off], !refuse && off == len(buf)); err != nil {
			return true, err
		}
		_, _ = r.Discard(off)
	}
	if refuse {
		return true, errDraining
	}
	if full {
		// Push back: read nothing more from the client until the server
		// has answered some of what it sent.
		if err := s.upstreamWriter.Flush(); err != nil {
			return true, err
		}
		if !t.waitRoom() {
			return true, errDraining
		}
	}
	return off > 0, nil
}

// nameAt returns the hash of the i-th NUL-terminated string (0 or 1) of b,
// the start of a message body, as peekName does.
func nameAt(b []byte, i int) uint64 {
	for {
		name, rest, ok := cstring(b)
		if !ok {
			return nameHash(b)
		}
		if i == 0 {
			return nameHash(name)
		}
		i--
		b = rest
	}
}
