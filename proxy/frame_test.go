package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"runtime"
	"testing"
)

func header(typ byte, bodyLen int) []byte {
	h := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(h[1:], uint32(bodyLen+4))
	return h
}

// A body larger than the read buffer is read whole, and a body that is
// announced but never sent costs the bytes that came, not the bytes
// announced.
func TestFrameBody(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320 KB, several buffers
	in := append(header('E', len(big)), big...)
	f := frameReader{r: bufio.NewReaderSize(bytes.NewReader(in), bufSize), max: 1 << 30}
	typ, n, err := f.peekHeader()
	if err != nil || typ != 'E' || n != len(big) {
		t.Fatalf("peekHeader = %q, %d, %v", typ, n, err)
	}
	b, err := f.body(n)
	if err != nil || !bytes.Equal(b, big) {
		t.Fatalf("body: %d bytes, %v; want the %d sent", len(b), err, len(big))
	}

	liar := append(header('E', 1<<30-5), "only this"...)
	f = frameReader{r: bufio.NewReaderSize(bytes.NewReader(liar), bufSize), max: 1 << 30}
	if _, n, err = f.peekHeader(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if _, err := f.body(n); err == nil {
		t.Fatal("body of a truncated message: no error")
	}
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 16<<20 {
		t.Fatalf("a 1 GB announcement with 9 bytes sent allocated %d bytes", d)
	}
}

// A batch read at once forwards the whole messages before a bad one and
// nothing from the bad one on, and the tracker counts what it forwarded.
func TestFrameBatchStopsAtABadMessage(t *testing.T) {
	q := frame('Q', "SELECT 1\x00")
	bad := [][]byte{
		frame('Z', "I"),               // not a frontend message
		{'Q', 0, 0, 0, 2},             // length below 4
		frame('C', "X\x00"),           // Close of neither a statement nor a portal
		{'Q', 0x7f, 0xff, 0xff, 0xff}, // length above the maximum
	}
	for _, b := range bad {
		in := bytes.Join([][]byte{q, frame('P', "s\x00SELECT 2\x00\x00\x00"), b, q}, nil)
		s, _, up := memSession(t, in, nil)
		err := s.frontendPump()
		if !errors.Is(err, errProtocol) {
			t.Fatalf("after % x: err %v, want a protocol error", b[:5], err)
		}
		// Nothing was flushed: the session closes on the error.
		if up.w.Len() != 0 {
			t.Fatalf("after % x: %d bytes flushed upstream", b[:5], up.w.Len())
		}
		_ = s.upstreamWriter.Flush()
		if got, want := up.w.Bytes(), in[:len(q)+len(frame('P', "s\x00SELECT 2\x00\x00\x00"))]; !bytes.Equal(got, want) {
			t.Fatalf("after % x: buffered upstream % x, want % x", b[:5], got, want)
		}
		if s.track.pending != 1 || s.track.unsynced != 1 {
			t.Fatalf("after % x: tracker pending %d unsynced %d, want 1 and 1", b[:5], s.track.pending, s.track.unsynced)
		}
	}
}
