package servers

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
)

// Port is an address the stack wants to listen on and the setting that
// moves it.
type Port struct {
	Addr    string // host:port
	What    string // e.g. "proxy"
	Setting string // e.g. "PersistentConfig.ProxyListen"
}

// CheckPorts tries to listen on each address and returns one error, one
// line, naming every one that is taken, what wanted it and the settings
// that move them.
func CheckPorts(ports ...Port) error {
	var taken, settings []string
	for _, p := range ports {
		if err := checkPort(p.Addr); err != nil {
			taken = append(taken, fmt.Sprintf("%s (%s)", p.Addr, p.What))
			if !slices.Contains(settings, p.Setting) {
				settings = append(settings, p.Setting)
			}
		}
	}
	switch len(taken) {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("%w: %s is taken; stop what listens there or move it with %s", ErrPortInUse, taken[0], settings[0])
	}
	return fmt.Errorf("%w: %s are taken; stop what listens there or move them with %s",
		ErrPortInUse, strings.Join(taken, ", "), strings.Join(settings, ", "))
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
