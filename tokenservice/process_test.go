package tokenservice_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenclient"
)

// proc is a `fencegate token serve` process.
type proc struct {
	t    testing.TB
	name string
	args []string
	// wrap, when set, runs the binary through it (e.g. ip netns exec NS).
	wrap []string
	// env, when set, is the process's environment (else the test's).
	env  []string
	cmd  *exec.Cmd
	mu   sync.Mutex
	logs bytes.Buffer
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

// start runs the process and waits until it prints that it serves.
func (p *proc) start() {
	p.t.Helper()
	p.wait(p.launch())
}

// launch runs the process (inside p.wrap, e.g. ip netns exec, when set);
// the channel yields the line saying it serves.
func (p *proc) launch() <-chan string {
	p.t.Helper()
	argv := append(append(append([]string(nil), p.wrap...), testutil.Binary(p.t)), p.args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = p.env
	cmd.Stderr = p
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.cmd = cmd
	serving := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving") {
				serving <- sc.Text()
			}
		}
		close(serving)
	}()
	return serving
}

// wait waits for the line saying the process serves.
func (p *proc) wait(serving <-chan string) {
	p.t.Helper()
	select {
	case line, ok := <-serving:
		if !ok {
			p.t.Fatalf("%s exited before serving:\n%s", p.name, p.tail())
		}
		p.t.Logf("%s: %s", p.name, line)
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not print that it serves within 30s:\n%s", p.name, p.tail())
	}
}

// kill sends SIGKILL and reaps the process.
func (p *proc) kill() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	_ = p.cmd.Wait()
	p.cmd = nil
}

func (p *proc) tail() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.logs.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// launchAll launches every process, then waits until each serves: a
// founding node serves only once every peer answers.
func launchAll(t *testing.T, procs []*proc) {
	t.Helper()
	serving := make([]<-chan string, len(procs))
	for i, p := range procs {
		serving[i] = p.launch()
	}
	for i, p := range procs {
		p.wait(serving[i])
	}
}

// startAll launches procs (launchAll), kills them when the test ends, and
// logs their output's tail if it failed.
func startAll(t *testing.T, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		t.Cleanup(p.kill)
	}
	launchAll(t, procs)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range procs {
				t.Logf("--- %s log tail:\n%s", p.name, p.tail())
			}
		}
	})
}

// startProcCluster starts n fencegate token serve processes of a new cluster.
func startProcCluster(t *testing.T, n int) ([]*proc, []string) {
	t.Helper()
	var peers, urls []string
	raft, api := make([]string, n), make([]string, n)
	for i := range n {
		raft[i], api[i] = testutil.FreeAddr(t), testutil.FreeAddr(t)
		peers = append(peers, fmt.Sprintf("n%d=%s=http://%s", i+1, raft[i], api[i]))
		urls = append(urls, "http://"+api[i])
	}
	dir := t.TempDir()
	var procs []*proc
	for i := range n {
		p := &proc{t: t, name: fmt.Sprintf("n%d", i+1), args: []string{
			"token", "serve", "--id", fmt.Sprintf("n%d", i+1), "--data-dir", fmt.Sprintf("%s/n%d", dir, i+1),
			"--raft-addr", raft[i], "--api-addr", api[i], "--peers", strings.Join(peers, ","),
			"--heartbeat-timeout", "200ms", "--election-timeout", "200ms", "--leader-lease-timeout", "150ms",
		}}
		procs = append(procs, p)
	}
	startAll(t, procs)
	return procs, urls
}

// Must show 3: all three nodes killed with SIGKILL while clients mint, then
// restarted from their data dirs: tokens continue above the largest ever
// returned.
func TestAllProcessesKilledTokensContinue(t *testing.T) {
	t.Parallel()
	procs, urls := startProcCluster(t, 3)
	cl, err := tokenclient.NewClient(urls, tokenclient.WithMaxWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var highest int64
	for round := 1; round <= 2; round++ {
		// Mint under load, then kill every process at once mid-load.
		l := startLoad([]*tokenclient.Client{cl}, 16)
		l.waitProgress(t, 300, fmt.Sprintf("before kill round %d", round))
		var wg sync.WaitGroup
		for _, p := range procs {
			wg.Add(1)
			go func() { defer wg.Done(); p.kill() }()
		}
		wg.Wait()
		ops := l.finish()
		history.Check(t, ops)
		for _, op := range ops {
			if op.Err == nil {
				highest = max(highest, op.Token)
			}
		}
		t.Logf("round %d: killed all nodes; highest token returned so far %d", round, highest)

		launchAll(t, procs)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		tok, err := cl.NextToken(ctx, "orders/42")
		cancel()
		if err != nil {
			t.Fatalf("NextToken after restart: %v", err)
		}
		if tok <= highest {
			t.Fatalf("after restarting all nodes: token %d <= highest returned before %d", tok, highest)
		}
		t.Logf("round %d: first token after restart %d", round, tok)
		highest = tok
	}
}

// A node runs its Go code on one P unless GOMAXPROCS says otherwise
// (tokenservice/DESIGN.md, "One P"); the Go collector's
// go_sched_gomaxprocs_threads shows the setting of the running process.
func TestNodeRunsOnOneP(t *testing.T) {
	t.Parallel()
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			base = append(base, kv)
		}
	}
	for _, tc := range []struct {
		name string
		env  []string
		want float64
	}{
		{"without GOMAXPROCS", base, 1},
		{"with GOMAXPROCS=3", append(slices.Clone(base), "GOMAXPROCS=3"), 3},
	} {
		raft, api := testutil.FreeAddr(t), testutil.FreeAddr(t)
		p := &proc{t: t, name: "n1", env: tc.env, args: []string{
			"token", "serve", "--id", "n1", "--data-dir", t.TempDir(),
			"--raft-addr", raft, "--api-addr", api, "--peers", fmt.Sprintf("n1=%s=http://%s", raft, api),
		}}
		p.start()
		got := scrape(t, "http://"+api)["go_sched_gomaxprocs_threads"]
		p.kill()
		if got != tc.want {
			t.Errorf("%s: the node runs on %v Ps, want %v", tc.name, got, tc.want)
		}
	}
}
