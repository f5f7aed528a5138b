package proxy

import (
	"bufio"
	"bytes"
	"encoding/binary"
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
