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
	"fmt"
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

	"github.com/fencegate/fencegate/fencegatetest/clientsuite"
)

func TestNodeClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a token cluster, five redis-servers and runs the Node.js suite")
	}
	major, minor := checkNode(t)
	installModules(t)
	s := clientsuite.Start(t, "node")

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
	pattern := os.Getenv("FENCEGATE_NODE_TESTS") // run only the tests whose names match
	filtered := pattern != "" || os.Getenv("FENCEGATE_NODE_FILES") != ""
	flags := runnerFlags(major, minor)

	res := runSuite(t, s.Env(), flags, files, pattern)
	hung := res.timedOutOnly()
	if len(hung) == 0 {
		if msg := res.problem(filtered); msg != "" {
			t.Fatal(msg)
		}
		t.Log(summary(res.counts))
		return
	}
	// Every test that failed ran out of its time, none failed a check:
	// the machine may have been too busy (a CI run tests every package at
	// once). Those tests run once more; a second failure fails.
	// They run once more, alone; a second failure fails. A file that ran
	// out of its time as a whole runs again whole.
	t.Logf("%s; running them once more", res.problem(filtered))
	var names, whole []string
	for _, name := range hung {
		if strings.HasSuffix(name, ".test.js") && filepath.IsAbs(name) {
			whole = append(whole, name)
		} else {
			names = append(names, name)
		}
	}
	if len(names) > 0 {
		again := runSuite(t, s.Env(), flags, files, namePattern(names))
		if msg := again.problem(true); msg != "" {
			t.Fatalf("on the second try: %s", msg)
		}
		if again.counts["pass"] < len(names) {
			t.Fatalf("on the second try %d of the %d tests passed: %s", again.counts["pass"], len(names), summary(again.counts))
		}
	}
	if len(whole) > 0 {
		if msg := runSuite(t, s.Env(), flags, whole, pattern).problem(filtered); msg != "" {
			t.Fatalf("on the second try: %s", msg)
		}
	}
	t.Logf("what ran out of time passed on the second try: %s", strings.Join(hung, "; "))
}

// namePattern matches exactly the tests named.
func namePattern(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// runSuite runs node --test on files with env added to the environment,
// only the tests whose names match pattern when it is not empty, and
// returns what the suite said. With -v every line goes to the test log as
// it comes; otherwise a failure logs only what the failed tests printed.
func runSuite(t *testing.T, env, flags, files []string, pattern string) results {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	args := append([]string{"--test"}, flags...)
	if pattern != "" {
		args = append(args, "--test-name-pattern", pattern)
	}
	args = append(args, files...)
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Env = append(cmd.Env, "FENCEGATE_NODE_TEST_TIMEOUT_MS="+strconv.Itoa(int(testTimeout/time.Millisecond)))
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
	res := readSuite(t, out)
	res.err = cmd.Wait()
	res.suiteTimedOut = ctx.Err() != nil
	return res
}

// suiteTimeout bounds the whole Node.js suite (about 20 s when the machine
// is quiet). testTimeout bounds each of its tests (test/support.js reads
// it), so that one that hangs fails under its own name and the rest of its
// file still runs; fileTimeout bounds each file's process, for what the
// first cannot catch (node 20's --test-timeout applies to a file as a
// whole and loses the names of the tests inside).
const (
	suiteTimeout = 6 * time.Minute
	testTimeout  = 60 * time.Second
	fileTimeout  = 3 * time.Minute
)

// runnerFlags are the flags of node --test that keep a hung test from
// hanging the suite, where the node at hand has them: a timeout per file
// (20.11 and later) and the exit of each file's process once its tests are
// done, whatever handles a failed test left open (20.14 and later).
func runnerFlags(major, minor int) []string {
	var flags []string
	if major > 20 || major == 20 && minor >= 11 {
		flags = append(flags, "--test-timeout="+strconv.Itoa(int(fileTimeout/time.Millisecond)))
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
	subtestRe = regexp.MustCompile(`^# Subtest: (.*)$`)
	notOKRe   = regexp.MustCompile(`^not ok \d+ - (.*)$`)
	resultRe  = regexp.MustCompile(`^(?:not )?ok \d+ - (.*?)(?: # SKIP.*)?$`)
	timeoutRe = regexp.MustCompile(`^\s+failureType: 'testTimeoutFailure'$`)
)

// results is what the suite's output said: the counts of the summary
// node --test prints at the end, the tests that failed (and which of them
// only ran out of time), the tests that started and have not ended, and
// what each failed test printed.
type results struct {
	counts        map[string]int
	failed        []string
	timedOut      []string // the files of the tests that only ran out of time
	running       []string
	printed       map[string][]string // test name: its lines, from "# Subtest" to the end of its result
	err           error               // how node exited
	suiteTimedOut bool
}

// where names the failed tests and those still running, for the last line
// of a failure.
func (r results) where() string {
	var parts []string
	if len(r.failed) > 0 {
		parts = append(parts, "failed: "+strings.Join(r.failed, "; "))
	}
	if len(r.timedOut) > 0 {
		parts = append(parts, fmt.Sprintf("%d of them ran out of time", len(r.timedOut)))
	}
	if len(r.running) > 0 {
		parts = append(parts, "still running: "+strings.Join(r.running, "; "))
	}
	if len(parts) == 0 {
		return "no test failed"
	}
	return strings.Join(parts, "; ")
}

// problem says what went wrong, "" when nothing did. With filtered, the
// tests a name or file pattern left out count as skipped.
func (r results) problem(filtered bool) string {
	switch {
	case r.suiteTimedOut:
		return fmt.Sprintf("the Node.js suite did not finish within %v; %s", suiteTimeout, r.where())
	case r.err != nil:
		return fmt.Sprintf("the Node.js suite failed (%v): %s; %s", r.err, summary(r.counts), r.where())
	}
	if msg := checkCounts(r.counts, filtered); msg != "" {
		return msg + "; " + r.where()
	}
	return ""
}

// timedOutOnly returns the failed tests when each of them failed by
// running out of its time and the suite itself ended; nil otherwise.
func (r results) timedOutOnly() []string {
	if r.suiteTimedOut || len(r.failed) == 0 || len(r.running) > 0 || len(r.timedOut) != len(r.failed) {
		return nil
	}
	return r.timedOut
}

// readSuite reads the suite's TAP output. With -v each line goes to the
// test log as it comes; otherwise the lines of each failed test are logged
// once it has failed, so that a failure's log is what failed, not the
// whole suite (a CI log may show only its start and its end).
func readSuite(t *testing.T, r io.Reader) results {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	res := results{counts: map[string]int{}, printed: map[string][]string{}}
	current, inResult := "", false
	for sc.Scan() {
		line := sc.Text()
		if testing.Verbose() {
			t.Log(line)
		}
		if m := countRe.FindStringSubmatch(line); m != nil {
			res.counts[m[1]], _ = strconv.Atoi(m[2])
		}
		if m := subtestRe.FindStringSubmatch(line); m != nil {
			current, inResult = m[1], false
			res.running = append(res.running, current)
		}
		if current != "" {
			res.printed[current] = append(res.printed[current], line)
		}
		if m := resultRe.FindStringSubmatch(line); m != nil {
			if i := slices.Index(res.running, m[1]); i >= 0 {
				res.running = slices.Delete(res.running, i, i+1)
			}
			inResult = true
		}
		if m := notOKRe.FindStringSubmatch(line); m != nil {
			res.failed = append(res.failed, m[1])
		}
		if inResult && timeoutRe.MatchString(line) && slices.Contains(res.failed, current) && !slices.Contains(res.timedOut, current) {
			res.timedOut = append(res.timedOut, current)
		}
		if inResult && strings.TrimSpace(line) == "..." {
			// The end of a test's result: log what a failed one printed.
			if slices.Contains(res.failed, current) && !testing.Verbose() {
				t.Logf("what %q printed:\n%s", current, strings.Join(res.printed[current], "\n"))
			}
			delete(res.printed, current)
			current, inResult = "", false
		}
	}
	if !testing.Verbose() {
		for _, name := range res.running {
			t.Logf("what %q, still running, printed:\n%s", name, strings.Join(res.printed[name], "\n"))
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
