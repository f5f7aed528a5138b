// Package python_test runs the Python client's unittest suite against a real
// stack: a 3-node token cluster, the shared Redis, three redis-servers for
// Redlock, one with a password and one with TLS, a fresh database behind the
// fence, a TLS front that asks for a client certificate and a bearer token,
// a Go lockclient the Python tests drive to contend with it, and a token
// service that signs its tokens beside a database that requires signed
// tokens.
package python_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencegatetest/clientsuite"
)

// python is Debian's interpreter, which has python3-psycopg2 and
// python3-redis (scripts/services.sh installs both).
const python = "/usr/bin/python3"

func TestPythonClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a token cluster, five redis-servers and runs the Python suite")
	}
	checkPython(t)
	s := clientsuite.Start(t, "python")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	args := []string{"-B", "-m", "unittest", "discover", "-v", "-s", "tests"}
	if k := os.Getenv("FENCEGATE_PYTHON_TESTS"); k != "" {
		args = append(args, "-k", k) // run only the tests whose names contain k
	}
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Env = append(os.Environ(), s.Env()...)
	cmd.Env = append(cmd.Env, "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", python, err)
	}
	summary := logLines(t, out)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the Python suite did not finish within 10 minutes")
	}
	if err != nil {
		t.Fatalf("the Python suite failed (%v): %s", err, summary)
	}
	if err := checkSummary(summary); err != "" {
		t.Fatal(err)
	}
	t.Log(summary)
}

// checkPython fails the test, saying what to install, when the interpreter
// or one of the client's dependencies is missing.
func checkPython(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s not found: install python3 (Debian's), with python3-redis and python3-psycopg", python)
	}
	for _, mod := range []struct{ name, pkg string }{{"redis", "python3-redis"}, {"psycopg", "python3-psycopg"}, {"psycopg2", "python3-psycopg2"}} {
		if out, err := exec.Command(python, "-c", "import "+mod.name).CombinedOutput(); err != nil {
			t.Fatalf("%s cannot import %s: install %s (scripts/services.sh does): %s", python, mod.name, mod.pkg, strings.TrimSpace(string(out)))
		}
	}
}

var ranRe = regexp.MustCompile(`^Ran (\d+) tests? in `)

// logLines copies the suite's output to the test log, line by line, and
// returns the summary: the "Ran N tests" line and the verdict after it.
func logLines(t *testing.T, r io.Reader) string {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var summary []string
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		if ranRe.MatchString(line) {
			summary = []string{line}
		} else if len(summary) > 0 && strings.TrimSpace(line) != "" {
			summary = append(summary, line)
		}
	}
	return strings.Join(summary, " / ")
}

var skippedRe = regexp.MustCompile(`skipped=(\d+)`)

// checkSummary insists that tests ran, all passed, and none was skipped
// (a missing service fails a test, it never skips one).
func checkSummary(summary string) string {
	m := ranRe.FindStringSubmatch(summary)
	if m == nil {
		return "the Python suite printed no 'Ran N tests' line"
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		return "the Python suite ran no test"
	}
	if !strings.Contains(summary, "OK") {
		return "the Python suite did not end with OK: " + summary
	}
	if sm := skippedRe.FindStringSubmatch(summary); sm != nil && sm[1] != "0" {
		return "the Python suite skipped tests: " + summary
	}
	return ""
}
