package servers

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// Port is an address the stack wants to listen on and the setting that
// moves it.
type Port struct {
	Addr    string // host:port
	What    string // e.g. "proxy"
	Setting string // e.g. "PersistentConfig.ProxyListen"
}

// CheckPorts tries to listen on each address and returns an error naming
// every one that is taken, what wanted it and the setting that moves it.
func CheckPorts(ports ...Port) error {
	var errs []error
	for _, p := range ports {
		if err := checkPort(p.Addr); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s (%s) is taken; stop what listens there or move it with %s", ErrPortInUse, p.Addr, p.What, p.Setting))
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

// IsAddrInUse reports whether err is a listen failure because the address is taken.
func IsAddrInUse(err error) bool { return errors.Is(err, syscall.EADDRINUSE) }
