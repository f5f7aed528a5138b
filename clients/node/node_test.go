// Package node_test runs the Node.js client's test suite (node --test)
// against a real stack: a 3-node token cluster, the shared Redis, three
// redis-servers for Redlock, one with a password and one with TLS, a fresh
// database behind the fence, a TLS front that asks for a client certificate
// and a bearer token, a Go lockclient the Node.js tests drive to contend
// with it, and a token service that signs its tokens beside a database that
// requires signed tokens.
package node_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/clientstack"
)

func TestNodeClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a token cluster, five redis-servers and runs the Node.js suite")
	}
	major, minor := checkNode(t)
	installModules(t)
	s := clientstack.Start(t, "node")

	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	args := append([]string{"--test"}, runnerFlags(major, minor)...)
	if k := os.Getenv("FENCEGATE_NODE_TESTS"); k != "" {
		args = append(args, "--test-name-pattern", k) // run only the tests whose names match k
	}
	files, err := filepath.Glob(filepath.Join("test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test files under test/ (%v)", err)
	}
	if f := os.Getenv("FENCEGATE_NODE_FILES"); f != "" {
		// Run only the files whose names match, e.g. "fence|lock".
		re, err := regexp.Compile(f)
		if err != nil {
			t.Fatalf("FENCEGATE_NODE_FILES: %v", err)
		}
		var keep []string
		for _, file := range files {
			if re.MatchString(filepath.Base(file)) {
				keep = append(keep, file)
			}
		}
		files = keep
	}
	args = append(args, files...)
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	res := logLines(t, out)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the Node.js suite did not finish within %v; %s", suiteTimeout, res.where())
	}
	if err != nil {
		t.Fatalf("the Node.js suite failed (%v): %s; %s", err, summary(res.counts), res.where())
	}
	if msg := checkCounts(res.counts, os.Getenv("FENCEGATE_NODE_TESTS") != "" || os.Getenv("FENCEGATE_NODE_FILES") != ""); msg != "" {
		t.Fatalf("%s; %s", msg, res.where())
	}
	t.Log(summary(res.counts))
}

// suiteTimeout bounds the whole Node.js suite (about 20 s when the machine
// is quiet); testTimeout bounds each of its tests, so that one that hangs
// fails under its own name and the others still run.
const (
	suiteTimeout = 6 * time.Minute
	testTimeout  = 90 * time.Second
)

// runnerFlags are the flags of node --test that keep a hung test from
// hanging the suite, where the node at hand has them: a timeout per test
// (20.11 and later) and the exit of each file's process once its tests are
// done, whatever handles a failed test left open (20.14 and later).
func runnerFlags(major, minor int) []string {
	var flags []string
	if major > 20 || major == 20 && minor >= 11 {
		flags = append(flags, "--test-timeout="+strconv.Itoa(int(testTimeout/time.Millisecond)))
	}
	if major > 20 || major == 20 && minor >= 14 {
		flags = append(flags, "--test-force-exit")
	}
	return flags
}

// checkNode fails the test, saying what to install, when node or npm is
// missing or node is older than 18; it returns node's major and minor
// version.
func checkNode(t testing.TB) (major, minor int) {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s not found: install Node.js 18 or later with npm (scripts/services.sh does)", bin)
		}
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	if major < 18 {
		t.Fatalf("node %s is too old: the client needs Node.js 18 or later", v)
	}
	return major, minor
}

// installModules runs npm ci when node_modules is missing or older than
// package-lock.json.
func installModules(t testing.TB) {
	t.Helper()
	lock, err := os.Stat("package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join("node_modules", ".package-lock.json")); err == nil && !st.ModTime().Before(lock.ModTime()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci failed (it fetches ioredis and pg from the npm registry): %v\n%s", err, out)
	}
}

var (
	countRe   = regexp.MustCompile(`^# (tests|suites|pass|fail|cancelled|skipped|todo) (\d+)$`)
	subtestRe = regexp.MustCompile(`^\s*# Subtest: (.*)$`)
	notOKRe   = regexp.MustCompile(`^\s*not ok \d+ - (.*)$`)
	resultRe  = regexp.MustCompile(`^\s*(?:not )?ok \d+ - (.*)$`)
)

// results is what the suite's output said: the counts of the summary
// node --test prints at the end, the tests that failed, and the tests
// that started and have not ended.
type results struct {
	counts  map[string]int
	failed  []string
	running []string
}

// where names the failed tests and those still running, for the last line
// of a failure (the log above it may be cut).
func (r results) where() string {
	var parts []string
	if len(r.failed) > 0 {
		parts = append(parts, "failed: "+strings.Join(r.failed, "; "))
	}
	if len(r.running) > 0 {
		parts = append(parts, "still running: "+strings.Join(r.running, "; "))
	}
	if len(parts) == 0 {
		return "no test failed"
	}
	return strings.Join(parts, "; ")
}

// logLines copies the suite's output to the test log, line by line, and
// returns what it said.
func logLines(t *testing.T, r io.Reader) results {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	res := results{counts: map[string]int{}}
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if m := countRe.FindStringSubmatch(line); m != nil {
			res.counts[m[1]], _ = strconv.Atoi(m[2])
		}
		if m := subtestRe.FindStringSubmatch(line); m != nil {
			res.running = append(res.running, m[1])
		}
		if m := resultRe.FindStringSubmatch(line); m != nil {
			if i := slices.Index(res.running, m[1]); i >= 0 {
				res.running = slices.Delete(res.running, i, i+1)
			}
		}
		if m := notOKRe.FindStringSubmatch(line); m != nil {
			res.failed = append(res.failed, m[1])
		}
	}
	return res
}

func summary(c map[string]int) string {
	return "tests " + strconv.Itoa(c["tests"]) + ", pass " + strconv.Itoa(c["pass"]) + ", fail " + strconv.Itoa(c["fail"]) +
		", cancelled " + strconv.Itoa(c["cancelled"]) + ", skipped " + strconv.Itoa(c["skipped"]) + ", todo " + strconv.Itoa(c["todo"])
}

// checkCounts insists that tests ran, all passed, and none was skipped (a
// missing service fails a test, it never skips one); with filtered, the
// tests the name pattern left out count as skipped.
func checkCounts(c map[string]int, filtered bool) string {
	switch {
	case c["tests"] == 0:
		return "the Node.js suite ran no test (no '# tests N' line)"
	case c["fail"] != 0 || c["cancelled"] != 0:
		return "the Node.js suite failed: " + summary(c)
	case filtered:
		return ""
	case c["skipped"] != 0 || c["todo"] != 0:
		return "the Node.js suite skipped tests: " + summary(c)
	case c["pass"] != c["tests"]:
		return "not every test of the Node.js suite passed: " + summary(c)
	}
	return ""
}
