package lockclient

import (
	"crypto/tls"
	"net"
	"syscall"
)

// pendingInput reports whether the server has sent anything that nobody
// has read yet on c, without reading it: on a session idle inside a
// transaction that is the FATAL of a session PostgreSQL ended (a
// terminated backend, an idle-in-transaction timeout, a shutdown). It
// peeks at the socket (MSG_PEEK, non-blocking) and says false when it
// cannot tell.
//
// The peek goes through the descriptor without taking its read lock
// (RawConn.Control, not Read): pgx starts a background reader when a write
// is slow (a loaded machine, a full socket buffer), and that reader may
// stay parked in Read, holding the lock, until the server sends something,
// which an idle session inside a transaction never does. Waiting for the
// lock hung InTx before COMMIT for good. If that reader has already taken
// the bytes into its buffer, the peek finds nothing and COMMIT reads them,
// as it would without the peek.
func pendingInput(c net.Conn) bool {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	var buf [1]byte
	_ = raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n == 0 with no error: the server closed the connection.
		pending = err == nil && n >= 0
	})
	return pending
}
