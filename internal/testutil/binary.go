package testutil

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
	buildOut  []byte
)

// Main runs the tests of a package and removes what the helpers left in the
// temporary directory (the built binary). Use it as the body of TestMain:
//
//	func TestMain(m *testing.M) { testutil.Main(m) }
//
// Examples cannot skip themselves: under -short, Main leaves out those
// whose names match needServices, a regular expression as -skip takes
// (examples that reach PostgreSQL, Redis or the network).
func Main(m *testing.M, needServices ...string) {
	if len(needServices) > 0 {
		flag.Parse()
		if testing.Short() {
			skip := flag.Lookup("test.skip")
			pats := append([]string{skip.Value.String()}, needServices...)
			if pats[0] == "" {
				pats = pats[1:]
			}
			if err := skip.Value.Set(strings.Join(pats, "|")); err != nil {
				panic(err)
			}
		}
	}
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// Binary builds ./cmd/fencegate once per test process and returns the path
// of the executable. Packages that use it should call Main from TestMain so
// that the build is removed afterwards.
func Binary(t testing.TB) string {
	t.Helper()
	NeedServices(t)
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		buildDir, buildErr = os.MkdirTemp("", "fencegate-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "fencegate")
		cmd := exec.Command("go", "build", "-o", buildBin, "./cmd/fencegate")
		cmd.Dir = root
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build fencegate: %v\n%s", buildErr, buildOut)
	}
	return buildBin
}
