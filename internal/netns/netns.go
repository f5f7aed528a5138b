// Package netns builds a small network of hosts out of Linux network
// namespaces, for tests that need separate hosts on one machine: each host
// is a namespace with its own address, wired by a veth pair to a bridge in
// a namespace of its own (the switch). Nothing is added to the namespace
// the test runs in. A host is cut off from others with real packet drops
// (nftables rules inside its namespace), and a test reaches the hosts by
// dialing from inside one of them.
//
// It needs root, iproute2 (ip) and nftables (nft). Names carry the creating
// process's ID, so a later run removes what a killed run left behind.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Net is a switch namespace and the host namespaces wired to it.
type Net struct {
	prefix string
	hosts  []*Host

	mu      sync.Mutex
	dialers []*dialer
}

// Host is one namespace on the network.
type Host struct {
	Name string // as given to New, e.g. "n1"
	NS   string // the namespace's name
	IP   string // its address on the network
}

// namePattern matches the names this package creates: fg, the creating
// process's ID in hex, r, two random hex digits, a dash.
var namePattern = regexp.MustCompile(`^fg([0-9a-f]+)r[0-9a-f]{2}-`)

// New creates a network with one host per name (at most 250; names of at
// most 3 characters), addressed 10.RR.0.1, 10.RR.0.2, ... in order, where
// RR is a random byte. On error it removes whatever it had created.
func New(names ...string) (n *Net, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("netns: network namespaces need root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("netns: %s not found (install iproute2 and nftables; scripts/services.sh does)", tool)
		}
	}
	if len(names) == 0 || len(names) > 250 {
		return nil, fmt.Errorf("netns: %d hosts; want 1 to 250", len(names))
	}
	Sweep()
	var rnd [2]byte
	_, _ = rand.Read(rnd[:])
	n = &Net{prefix: fmt.Sprintf("fg%xr%s-", os.Getpid(), hex.EncodeToString(rnd[:1]))}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	sw := n.prefix + "sw"
	if err := run("ip", "netns", "add", sw); err != nil {
		return n, err
	}
	if err := runAll(
		[]string{"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "-n", sw, "link", "set", "br0", "up"},
		[]string{"ip", "-n", sw, "link", "set", "lo", "up"},
	); err != nil {
		return n, err
	}
	subnet := 16 + int(rnd[1])%200
	for i, name := range names {
		if len(name) == 0 || len(name) > 3 || strings.ContainsAny(name, " /-") {
			return n, fmt.Errorf("netns: host name %q: use 1 to 3 letters or digits", name)
		}
		h := &Host{Name: name, NS: n.prefix + name, IP: fmt.Sprintf("10.%d.0.%d", subnet, i+1)}
		if err := run("ip", "netns", "add", h.NS); err != nil {
			return n, err
		}
		n.hosts = append(n.hosts, h)
		veth, port := n.prefix+name, n.prefix+name+"s"
		// Both ends are created inside their namespaces: the test's own
		// namespace never sees them.
		if err := runAll(
			[]string{"ip", "link", "add", veth, "netns", h.NS, "type", "veth", "peer", "name", port, "netns", sw},
			[]string{"ip", "-n", sw, "link", "set", port, "master", "br0", "up"},
			[]string{"ip", "-n", h.NS, "addr", "add", h.IP + "/24", "dev", veth},
			[]string{"ip", "-n", h.NS, "link", "set", veth, "up"},
			[]string{"ip", "-n", h.NS, "link", "set", "lo", "up"},
		); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Prefix is the start of every name the network uses.
func (n *Net) Prefix() string { return n.prefix }

// Hosts returns the hosts, in the order given to New.
func (n *Net) Hosts() []*Host { return n.hosts }

// Host returns the host named name, or nil.
func (n *Net) Host(name string) *Host {
	for _, h := range n.hosts {
		if h.Name == name {
			return h
		}
	}
	return nil
}

// Command returns a command that runs name with args inside host's
// namespace ("ip netns exec" executes it in place, so the command's
// process is the program itself).
func (n *Net) Command(host *Host, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", host.NS, name}, args...)...)
}

// cutTable is the nftables table Cut installs in a host's namespace.
const cutTable = "fencegate_cut"

// Cut drops every packet between host and each of peers, in both
// directions, inside host's namespace: connections to and from them hang
// as on a failed link. It replaces an earlier Cut of host.
func (n *Net) Cut(host *Host, peers ...*Host) error {
	if len(peers) == 0 {
		return n.Heal(host)
	}
	ips := make([]string, len(peers))
	for i, p := range peers {
		ips[i] = p.IP
	}
	set := "{ " + strings.Join(ips, ", ") + " }"
	rules := fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	chain in {
		type filter hook input priority -10; policy accept;
		ip saddr %[2]s drop
	}
	chain out {
		type filter hook output priority -10; policy accept;
		ip daddr %[2]s drop
	}
}
`, cutTable, set)
	cmd := exec.Command("ip", "netns", "exec", host.NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: cut %s off from %s: %v: %s", host.Name, set, err, bytes.TrimSpace(out))
	}
	return nil
}

// Heal removes host's Cut rules.
func (n *Net) Heal(host *Host) error {
	cmd := exec.Command("ip", "netns", "exec", host.NS, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\n", cutTable))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: heal %s: %v: %s", host.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// Rules returns the nftables ruleset inside host's namespace.
func (n *Net) Rules(host *Host) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", host.NS, "nft", "list", "ruleset").CombinedOutput()
	return string(out), err
}

// Close removes every namespace of the network (their veths and rules go
// with them) and stops the dialers. It reports what could not be removed.
func (n *Net) Close() error {
	n.mu.Lock()
	for _, d := range n.dialers {
		d.close()
	}
	n.dialers = nil
	n.mu.Unlock()
	var errs []error
	for _, ns := range n.namespaces() {
		if err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	left, err := Leftovers(n.prefix)
	if err != nil {
		errs = append(errs, err)
	} else if len(left) > 0 {
		errs = append(errs, fmt.Errorf("netns: left behind: %s", strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// namespaces lists the namespaces whose names start with the prefix.
func (n *Net) namespaces() []string {
	var out []string
	for _, ns := range listNamespaces() {
		if strings.HasPrefix(ns, n.prefix) {
			out = append(out, ns)
		}
	}
	return out
}

// Leftovers lists the namespaces and the links of the calling namespace
// whose names start with prefix.
func Leftovers(prefix string) ([]string, error) {
	var left []string
	for _, ns := range listNamespaces() {
		if strings.HasPrefix(ns, prefix) {
			left = append(left, "namespace "+ns)
		}
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return nil, fmt.Errorf("netns: ip link show: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(strings.TrimSuffix(f[1], ":"), prefix) {
			left = append(left, "link "+strings.TrimSuffix(f[1], ":"))
		}
	}
	return left, nil
}

// Sweep removes the namespaces a process that no longer runs created (a
// test killed before its cleanup).
func Sweep() {
	for _, ns := range listNamespaces() {
		m := namePattern.FindStringSubmatch(ns)
		if m == nil {
			continue
		}
		pid, err := strconv.ParseInt(m[1], 16, 64)
		if err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.FormatInt(pid, 10)); errors.Is(err, os.ErrNotExist) {
			_ = run("ip", "netns", "del", ns)
		}
	}
}

func listNamespaces() []string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names
}

func run(name string, args ...string) error {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func runAll(cmds ...[]string) error {
	for _, c := range cmds {
		if err := run(c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// DialFunc is a net.Dialer.DialContext.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dialer returns a dial function whose connections start inside host's
// namespace, so a test process reaches the network as host does. A socket
// belongs to the namespace of the thread that creates it; the dials run on
// a few threads moved into host's namespace for good (their goroutines end
// locked, so the runtime retires the threads). It dials only addresses of
// the network's hosts. Close stops it.
func (n *Net) Dialer(host *Host) (DialFunc, error) {
	fd, err := unix.Open("/run/netns/"+host.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns: open namespace %s: %w", host.NS, err)
	}
	d := &dialer{reqs: make(chan dialReq), done: make(chan struct{}), allowed: map[string]bool{}}
	for _, h := range n.hosts {
		d.allowed[h.IP] = true
	}
	const threads = 8
	started := make(chan error, threads)
	for range threads {
		d.wg.Add(1)
		go d.serve(fd, started)
	}
	for range threads {
		if err := <-started; err != nil {
			d.close()
			unix.Close(fd)
			return nil, err
		}
	}
	unix.Close(fd)
	n.mu.Lock()
	n.dialers = append(n.dialers, d)
	n.mu.Unlock()
	return d.dial, nil
}

type dialReq struct {
	ctx           context.Context
	network, addr string
	res           chan dialRes
}

type dialRes struct {
	c   net.Conn
	err error
}

type dialer struct {
	// allowed are the network's addresses: a dial anywhere else is refused,
	// so a test cannot send traffic off the network by mistake.
	allowed map[string]bool
	reqs    chan dialReq
	done    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func (d *dialer) serve(fd int, started chan<- error) {
	defer d.wg.Done()
	runtime.LockOSThread()
	// Never unlocked: this thread stays in host's namespace and ends with
	// the goroutine.
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		started <- fmt.Errorf("netns: setns: %w", err)
		return
	}
	started <- nil
	var nd net.Dialer
	for {
		select {
		case r := <-d.reqs:
			c, err := nd.DialContext(r.ctx, r.network, r.addr)
			r.res <- dialRes{c, err}
		case <-d.done:
			return
		}
	}
}

func (d *dialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if host, _, err := net.SplitHostPort(addr); err != nil || !d.allowed[host] {
		return nil, fmt.Errorf("netns: %s is not an address of this network; refusing to dial it", addr)
	}
	r := dialReq{ctx: ctx, network: network, addr: addr, res: make(chan dialRes, 1)}
	select {
	case d.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.done:
		return nil, net.ErrClosed
	}
	select {
	case res := <-r.res:
		return res.c, res.err
	case <-ctx.Done():
		go func() { // the dial ends with ctx; close what it may still return
			if res := <-r.res; res.c != nil {
				res.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

func (d *dialer) close() {
	d.once.Do(func() { close(d.done) })
	d.wg.Wait()
}

// Listen opens a TCP listener inside host's namespace.
func (n *Net) Listen(host *Host, addr string) (net.Listener, error) {
	fd, err := unix.Open("/run/netns/"+host.NS, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns: open namespace %s: %w", host.NS, err)
	}
	defer unix.Close(fd)
	type res struct {
		ln  net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is retired
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- res{nil, fmt.Errorf("netns: setns: %w", err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		ch <- res{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}
