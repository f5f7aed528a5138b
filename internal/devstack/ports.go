package devstack

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// Port is an address the stack wants to listen on and the flag that moves it.
type Port struct {
	Addr string // host:port
	What string // e.g. "proxy"
	Flag string // e.g. "--proxy-listen"
}

// CheckPorts tries to listen on each address and returns an error naming
// every one that is taken, what wanted it and the flag that moves it.
func CheckPorts(ports ...Port) error {
	var errs []error
	for _, p := range ports {
		if err := checkPort(p.Addr); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s (%s) is taken; stop what listens there or move it with %s", ErrPortInUse, p.Addr, p.What, p.Flag))
		}
	}
	return errors.Join(errs...)
}

func checkPort(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// PortFree reports whether addr can be listened on now.
func PortFree(addr string) bool { return checkPort(addr) == nil }

// FreeAddr returns 127.0.0.1:PORT for a port that was free a moment ago and
// that no earlier call in this process returned.
func FreeAddr() (string, error) {
	addrs, err := freeAddrs(1)
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// handedOut holds the ports freeAddrs returned in this process. A returned
// port is free but not held, and the kernel may hand the same port to the
// next listen on :0 once it is closed: without this record two nodes of one
// stack could be given the same port before either listens.
var handedOut sync.Map

// freeAddrs returns n distinct free loopback addresses, none returned before
// in this process.
func freeAddrs(n int) ([]string, error) {
	var out []string
	// Hold every listener until all are chosen, so no port is picked twice.
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("find free port: no port unused by this process after %d tries", tries)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		defer l.Close()
		if _, taken := handedOut.LoadOrStore(l.Addr().(*net.TCPAddr).Port, true); taken {
			continue
		}
		out = append(out, l.Addr().String())
	}
	return out, nil
}

// PreferAddrs returns preferred when every address in it is free, else the
// same number of free loopback addresses.
func PreferAddrs(preferred ...string) ([]string, error) {
	all := true
	for _, a := range preferred {
		if !PortFree(a) {
			all = false
			break
		}
	}
	if all {
		return preferred, nil
	}
	return freeAddrs(len(preferred))
}

// IsAddrInUse reports whether err is a listen failure because the address is taken.
func IsAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
