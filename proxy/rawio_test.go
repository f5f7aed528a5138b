package proxy

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestRawConnTransfersAndEnds(t *testing.T) {
	testutil.NeedServices(t)
	a, b := tcpPair(t)
	ra, rb := newRawConn(a), newRawConn(b)
	if _, ok := ra.(*rawConn); !ok {
		t.Fatalf("newRawConn(%T) = %T, want *rawConn", a, ra)
	}
	// More than the socket buffers hold: the writer must wait for room.
	want := make([]byte, 16<<20)
	_, _ = rand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := ra.Write(want)
		if err == nil {
			err = ra.(*rawConn).CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(rb)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, not the %d written", len(got), len(want))
	}
}

func TestRawConnCloseWakesReader(t *testing.T) {
	testutil.NeedServices(t)
	a, _ := tcpPair(t)
	ra := newRawConn(a)
	errc := make(chan error, 1)
	go func() {
		_, err := ra.Read(make([]byte, 10))
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ra.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close = %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not wake the blocked Read")
	}
	if _, err := ra.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close = %v, want net.ErrClosed", err)
	}
}

func TestRawConnDeadlines(t *testing.T) {
	testutil.NeedServices(t)
	a, _ := tcpPair(t)
	ra := newRawConn(a)
	_ = ra.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	_, err := ra.Read(make([]byte, 10))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past its deadline = %v, want a timeout", err)
	}
	// Nobody reads the other end: writing fills the buffers, then waits
	// for room until the deadline.
	_ = ra.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := ra.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past its deadline = %v, want a timeout", err)
	}
}

func TestRawConnPeerGone(t *testing.T) {
	testutil.NeedServices(t)
	a, b := tcpPair(t)
	ra := newRawConn(a)
	b.Close()
	if _, err := ra.Read(make([]byte, 10)); err != io.EOF {
		t.Fatalf("Read after the peer closed = %v, want io.EOF", err)
	}
	var err error
	for i := 0; i < 100 && err == nil; i++ { // the first writes may still be accepted
		_, err = ra.Write(make([]byte, 1<<10))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" {
		t.Fatalf("Write to a closed peer = %v, want a *net.OpError for write", err)
	}
}

func TestRawConnAllocatesNothing(t *testing.T) {
	testutil.NeedServices(t)
	a, b := tcpPair(t)
	ra, rb := newRawConn(a), newRawConn(b)
	msg, buf := []byte("ping"), make([]byte, 16)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := ra.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(rb, buf[:len(msg)]); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per write and read, want 0", allocs)
	}
}

func TestRawConnLeavesOthersAlone(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	if got := newRawConn(c1); got != c1 {
		t.Fatalf("newRawConn(%T) = %T, want the connection itself", c1, got)
	}
}
