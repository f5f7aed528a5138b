package proxy

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// Raw socket I/O. A session's pumps spend their life waiting for the next
// message, so the process keeps going idle and waking again, thousands of
// times a second. Go's runtime parks its sysmon thread while every P is
// idle, and the next ordinary system call (a net.Conn Read or Write) wakes it
// again and makes it poll every 20µs for a while: two extra thread wake-ups
// and measurable CPU per message, on a machine where the proxy shares its
// cores with PostgreSQL and the clients. rawConn reads and writes the
// non-blocking socket with syscall.RawSyscall, which skips that bookkeeping,
// and waits through the network poller as net.Conn does when the socket has
// nothing to read or no room to write. Raw system calls are safe here
// because on a non-blocking socket they never block.

// rawConn is a TCP connection whose Read and Write use raw system calls.
// Everything else, Close and deadlines included, is the TCPConn's: the
// poller waits honour deadlines and wake up on Close. One goroutine at a
// time may Read, and one at a time may Write (the session's pumps); the
// callbacks handed to the RawConn are made once, so that a call allocates
// nothing.
type rawConn struct {
	*net.TCPConn
	rc syscall.RawConn
	r  rawOp // the current Read
	w  rawOp // the current Write
}

// rawOp is one Read or Write in progress and its callback.
type rawOp struct {
	buf   []byte
	done  int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// newRawConn returns c with raw reads and writes when c is a plain TCP
// connection, else c itself (a TLS connection, for one).
func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rw := &rawConn{TCPConn: tc, rc: rc}
	rw.r.fn = rw.r.read
	rw.w.fn = rw.w.write
	return rw
}

// read makes one read(2); false means "nothing yet, wait until readable".
func (op *rawOp) read(fd uintptr) bool {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&op.buf[0])), uintptr(len(op.buf)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		op.done, op.errno = int(r), e
		return true
	}
}

// write writes all of buf; false means "wait until writable, then go on".
func (op *rawOp) write(fd uintptr) bool {
	for op.done < len(op.buf) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&op.buf[op.done])), uintptr(len(op.buf)-op.done))
		switch e {
		case 0:
			op.done += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			op.errno = e
			return true
		}
	}
	return true
}

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	op := &c.r
	op.buf, op.done, op.errno = p, 0, 0
	err := c.rc.Read(op.fn)
	op.buf = nil
	switch {
	case err != nil:
		return 0, c.opError("read", err)
	case op.errno != 0:
		return 0, c.opError("read", os.NewSyscallError("read", op.errno))
	case op.done == 0:
		return 0, io.EOF
	}
	return op.done, nil
}

func (c *rawConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	op := &c.w
	op.buf, op.done, op.errno = p, 0, 0
	err := c.rc.Write(op.fn)
	op.buf = nil
	switch {
	case err != nil:
		return op.done, c.opError("write", err)
	case op.errno != 0:
		return op.done, c.opError("write", os.NewSyscallError("write", op.errno))
	}
	return op.done, nil
}

// opError wraps a failure as net.Conn methods do, so that errors.Is finds
// net.ErrClosed and os.ErrDeadlineExceeded as usual.
func (c *rawConn) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok { // from the RawConn: "raw-read"
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}
