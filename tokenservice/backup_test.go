package tokenservice_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Disaster recovery: a snapshot of a cluster, the cluster lost, a new one
// founded and restored with a margin: its tokens are above every token the
// old one handed out, also after a crash of every node; a second restore
// with a smaller value never lowers the counter.
func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	old := tokenservicetest.StartCluster(t, 3)
	servers := strings.Join(old.APIURLs(), ",")
	tokenservicetest.Mint(t, old.Client(t), 100)
	file := filepath.Join(t.TempDir(), "token-snapshot.json")
	code, out, stderr := runCLI(t, "token", "snapshot", "--servers", servers, "--out", file)
	if code != 0 {
		t.Fatalf("snapshot: exit %d: %s", code, stderr)
	}
	t.Log(strings.TrimSpace(out))
	var sn tokenapi.Snapshot
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sn); err != nil || sn.Format != tokenapi.SnapshotFormat || sn.Counter < 100 || sn.ClusterID == "" || sn.Time.IsZero() {
		t.Fatalf("snapshot file %s: %v", b, err)
	}
	// After the snapshot the old cluster hands out more, then is lost.
	after := tokenservicetest.Mint(t, old.Client(t), 20)
	lost := after[len(after)-1]
	for i := range 3 {
		old.Kill(i)
	}

	fresh := tokenservicetest.StartCluster(t, 3)
	fservers := strings.Join(fresh.APIURLs(), ",")
	code, out, stderr = runCLI(t, "token", "restore", "--servers", fservers, "--from", file, "--margin", "1000")
	if code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr)
	}
	t.Log(strings.TrimSpace(out))
	target := sn.Counter + 1000
	for _, w := range []string{fmt.Sprintf("counter raised from 0 to %d", target), "note: the snapshot is of cluster " + sn.ClusterID} {
		if !strings.Contains(out, w) {
			t.Errorf("restore output does not say %q:\n%s", w, out)
		}
	}
	if tok := tokenservicetest.Mint(t, fresh.Client(t), 1)[0]; tok <= target || tok <= lost {
		t.Fatalf("first token after restore %d; want above %d (and above %d, the last the lost cluster handed out)", tok, target, lost)
	}
	// The raise is a committed entry: it survives a crash of every node.
	for i := range 3 {
		fresh.Kill(i)
	}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); fresh.Restart(i) }()
	}
	wg.Wait()
	fresh.Leader(t)
	if tok := tokenservicetest.Mint(t, fresh.Client(t), 1)[0]; tok <= target {
		t.Fatalf("token after restarting every node %d <= %d", tok, target)
	}
	// A restore never lowers the counter.
	code, out, _ = runCLI(t, "token", "restore", "--servers", fservers, "--from", file, "--margin", "0")
	if code != 0 || !strings.Contains(out, "counter left at") || !strings.Contains(out, "never lowers it") {
		t.Fatalf("restore below the counter: exit %d:\n%s", code, out)
	}
	if tok := tokenservicetest.Mint(t, fresh.Client(t), 1)[0]; tok <= target {
		t.Fatalf("token after a lower restore %d <= %d", tok, target)
	}
}

// Bad input to snapshot and restore: one line that says what is wrong, and
// nothing changes.
func TestSnapshotRestoreBadInput(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	servers := strings.Join(c.APIURLs(), ",")
	tokenservicetest.Mint(t, c.Client(t), 5)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if code, _, stderr := runCLI(t, "token", "snapshot", "--servers", servers, "--out", good); code != 0 {
		t.Fatal(stderr)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notJSON := write("notjson", "counter=5\n")
	otherFormat := write("other.json", `{"format":"etcd-snapshot","cluster_id":"c","counter":5}`)
	huge := write("huge.json", `{"format":"`+tokenapi.SnapshotFormat+`","cluster_id":"c","counter":9223372036854775000}`)
	cases := []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"snapshot without --out", []string{"token", "snapshot", "--servers", servers}, 2, []string{"--out is required"}},
		{"snapshot into a missing dir", []string{"token", "snapshot", "--servers", servers, "--out", filepath.Join(dir, "no", "such", "f.json")}, 1, []string{"no such file or directory"}},
		{"restore without --margin", []string{"token", "restore", "--servers", servers, "--from", good}, 2, []string{"--margin is required"}},
		{"restore with a negative margin", []string{"token", "restore", "--servers", servers, "--from", good, "--margin", "-5"}, 2, []string{"--margin is required and may not be negative"}},
		{"restore without --from", []string{"token", "restore", "--servers", servers, "--margin", "5"}, 2, []string{"--from is required"}},
		{"restore from a missing file", []string{"token", "restore", "--servers", servers, "--from", filepath.Join(dir, "missing"), "--margin", "5"}, 1, []string{"read snapshot", "no such file"}},
		{"restore from a file that is not JSON", []string{"token", "restore", "--servers", servers, "--from", notJSON, "--margin", "5"}, 1, []string{"is not a snapshot written by 'fencegate token snapshot'"}},
		{"restore from another format", []string{"token", "restore", "--servers", servers, "--from", otherFormat, "--margin", "5"}, 1, []string{`format "etcd-snapshot"`}},
		{"restore past the largest token", []string{"token", "restore", "--servers", servers, "--from", huge, "--margin", "1000"}, 2, []string{"exceeds the largest token"}},
	}
	before := maxStatusToken(c)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != tc.code || stdout != "" {
				t.Fatalf("exit %d (want %d), stdout %q, stderr:\n%s", code, tc.code, stdout, stderr)
			}
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			if tc.code == 1 && len(lines) != 1 {
				t.Errorf("stderr has %d lines, want 1:\n%s", len(lines), stderr)
			}
			oneLine(t, lines[len(lines)-1], tc.want...)
		})
	}
	if after := maxStatusToken(c); after != before {
		t.Fatalf("refused restores moved the counter from %d to %d", before, after)
	}
}
