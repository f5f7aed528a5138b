package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// DialFunc opens a TCP connection to addr. Tests use it to route Raft
// traffic through fault-injecting relays; the default is a plain dial.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// streamLayer is Raft's TCP stream layer with a replaceable dialer.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dial      DialFunc
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.dial(ctx, "tcp", string(addr))
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }

// listen opens a TCP listener and turns "address in use" into an error that
// says what to do.
func listen(what, addr, flag string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("%w: %s address %s is already in use; stop the process holding it or choose another %s", ErrAddrInUse, what, addr, flag)
		}
		return nil, fmt.Errorf("listen %s %s: %w", what, addr, err)
	}
	return ln, nil
}

// Listen is listen for other packages of this module: it names the flag to
// change when addr is in use.
func Listen(what, addr, flag string) (net.Listener, error) { return listen(what, addr, flag) }
