package proxy

import (
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
		}
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
