package devstack

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// scripts/services.sh installs a package only when what it provides is
// missing, whoever installed the rest, and says which and why; "check"
// says so and changes nothing; run by another user it names what is
// missing and installs nothing. The machine is faked: a PATH of stubs
// (apt-get records that it ran), an interpreter that has redis but not
// psycopg2.
func TestServicesScriptInstallsOnlyWhatIsMissing(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "..", "scripts", "services.sh")
	bin := t.TempDir()
	ran := filepath.Join(t.TempDir(), "apt-get-ran")
	stub := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Present outside Debian's packages (dpkg knows none of them).
	for _, p := range []string{"psql", "pgbench", "pg_isready", "pg_ctlcluster", "redis-server", "redis-cli", "pgbouncer", "etcd", "faketime", "ip", "node", "npm"} {
		stub(p, "exit 0")
	}
	stub("dpkg-query", "exit 1")
	stub("apt-get", "touch "+ran)
	stub("id", "echo 1000")
	stub("python3", `case "$2" in *psycopg2*) exit 1;; esac; exit 0`)
	for _, tool := range []string{"grep", "ls"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command("/bin/bash", append([]string{script}, args...)...)
		cmd.Env = []string{"PATH=" + bin, "FENCEGATE_PYTHON=" + filepath.Join(bin, "python3")}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	out, err := run("check")
	if err != nil {
		t.Fatalf("services.sh check: %v\n%s", err, out)
	}
	for _, want := range []string{"would install:", "etcd-client (etcdctl missing)", "nftables (nft missing)", "python3-psycopg2 (psycopg2 for"} {
		if !strings.Contains(out, want) {
			t.Errorf("services.sh check does not say %q:\n%s", want, out)
		}
	}
	for _, present := range []string{"pgbouncer", "redis-server", "redis-tools", "postgresql-client", "nodejs", "npm", "python3-redis", "etcd-server", "faketime (faketime"} {
		if strings.Contains(out, present) {
			t.Errorf("services.sh check would install %s, whose programs are here:\n%s", present, out)
		}
	}
	if strings.Count(out, "\n") != 1 {
		t.Errorf("services.sh check: want one line:\n%s", out)
	}

	out, err = run()
	if err == nil || !strings.Contains(out, "missing: ") || !strings.Contains(out, "apt-get install etcd-client") {
		t.Errorf("services.sh as another user with packages missing: %v; want it to stop naming them:\n%s", err, out)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Error("services.sh ran apt-get in check mode or as another user")
	}
}
