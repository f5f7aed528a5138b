package proxy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"slices"
)

// frameReader reads PostgreSQL typed messages (type byte, int32 length that
// counts itself, body) from a buffered reader without allocating: small
// bodies are returned as slices of the reader's buffer, large ones are
// streamed or read into a reused scratch buffer.
type frameReader struct {
	r       *bufio.Reader
	max     int // largest accepted length field
	scratch []byte
}

// peekHeader returns the type and body length of the next message without
// consuming it.
func (f *frameReader) peekHeader() (byte, int, error) {
	h, err := f.r.Peek(5)
	if err != nil {
		return 0, 0, err
	}
	n := int32(binary.BigEndian.Uint32(h[1:5]))
	if n < 4 || int(n) > f.max {
		return h[0], 0, fmt.Errorf("%w: message type %q with length %d (allowed 4..%d)", errProtocol, h[0], n, f.max)
	}
	return h[0], int(n) - 4, nil
}

// body consumes the message whose header was peeked (body length n) and
// returns its body, valid until the next call on f.
func (f *frameReader) body(n int) ([]byte, error) {
	if 5+n <= f.r.Size() {
		b, err := f.r.Peek(5 + n)
		if err != nil {
			return nil, err
		}
		_, _ = f.r.Discard(5 + n)
		return b[5:], nil
	}
	if _, err := f.r.Discard(5); err != nil {
		return nil, err
	}
	// The scratch buffer grows with the bytes that actually arrive, not with
	// the length the header claims: a peer that announces a gigabyte and
	// sends ten bytes costs ten bytes of memory, not a gigabyte.
	b := f.scratch[:0]
	for len(b) < n {
		chunk := min(n-len(b), max(len(b), bufSize))
		b = slices.Grow(b, chunk)[:len(b)+chunk]
		if _, err := ioReadFull(f.r, b[len(b)-chunk:]); err != nil {
			return nil, err
		}
	}
	f.scratch = b
	return b, nil
}

// copyTo consumes the message (body length n) and writes it unchanged,
// header included, to w.
func (f *frameReader) copyTo(w *bufio.Writer, n int) error {
	if 5+n <= f.r.Size() {
		// Whole message at once: a peer that stops mid-message never gets
		// a partial frame forwarded.
		b, err := f.r.Peek(5 + n)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		_, _ = f.r.Discard(5 + n)
		return err
	}
	// Larger messages stream through in buffer-sized pieces.
	left := 5 + n
	for left > 0 {
		chunk := left
		if chunk > f.r.Size() {
			chunk = f.r.Size()
		}
		if b := f.r.Buffered(); b > 0 && chunk > b {
			chunk = b
		}
		b, err := f.r.Peek(chunk)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		_, _ = f.r.Discard(chunk)
		left -= chunk
	}
	return nil
}

// sendBatch forwards b, a run of whole messages, through w, the buffered
// writer over out. When b is all its reader held (last) and w holds
// nothing, the pump would write b to w and flush it at once (a pump
// flushes whenever its reader's buffer is empty): b then goes to out
// straight from the read buffer, one write as before, without the copy.
func sendBatch(w *bufio.Writer, out *connRef, b []byte, last bool) error {
	if last && w.Buffered() == 0 {
		_, err := out.Write(b)
		return err
	}
	_, err := w.Write(b)
	return err
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writeMsg writes a typed message with body to w.
func writeMsg(w *bufio.Writer, typ byte, body []byte) error {
	// Byte by byte: a header array passed to Write would escape to the heap.
	n := uint32(len(body) + 4)
	_ = w.WriteByte(typ)
	_ = w.WriteByte(byte(n >> 24))
	_ = w.WriteByte(byte(n >> 16))
	_ = w.WriteByte(byte(n >> 8))
	if err := w.WriteByte(byte(n)); err != nil {
		return err
	}
	_, err := w.Write(body)
	return err
}

// appendMsg appends a typed message with body to dst.
func appendMsg(dst []byte, typ byte, body []byte) []byte {
	dst = append(dst, typ, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(dst[len(dst)-4:], uint32(len(body)+4))
	return append(dst, body...)
}

// cstring splits a NUL-terminated string off the front of b.
func cstring(b []byte) (s, rest []byte, ok bool) {
	for i, c := range b {
		if c == 0 {
			return b[:i], b[i+1:], true
		}
	}
	return nil, nil, false
}
