package tokenclient_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoServerDependencies fails when the client pulls in the server's
// storage: Raft, its BoltDB log store or bbolt (they would add megabytes to
// every program that only takes locks).
func TestNoServerDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/fencegate/fencegate/tokenclient").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list -deps printed no packages")
	}
	for _, d := range deps {
		if strings.Contains(d, "raft") || strings.Contains(d, "bolt") || d == "github.com/fencegate/fencegate/tokenservice" {
			t.Errorf("tokenclient depends on %s; keep server packages out of the client", d)
		}
	}
}

// TestAPIStandardLibraryOnly fails when package tokenapi, which every
// program speaking the API imports, imports anything beyond the standard
// library.
func TestAPIStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/fencegate/fencegate/tokenapi").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		if d != "github.com/fencegate/fencegate/tokenapi" {
			t.Errorf("tokenapi depends on %s; keep it to the standard library", d)
		}
	}
}
