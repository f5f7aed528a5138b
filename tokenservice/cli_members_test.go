package tokenservice_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// The membership commands as an operator runs them: list, a refused add
// and remove with one line each, an add that waits for the promotion, and
// a remove; bad command lines are usage errors.
func TestCLIMembers(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	servers := strings.Join(c.APIURLs(), ",")
	tokenservicetest.Mint(t, c.Client(t), 3)

	// A follower that was not needed for the last commit may not have
	// applied it yet when the leader asks: list until every member caught up.
	var out string
	testutil.WaitFor(t, 10*time.Second, "members list with every member caught up", func() error {
		code, o, stderr := runCLI(t, "token", "members", "list", "--servers", servers)
		out = o
		if code != 0 || strings.Count(out, "Voter") != 3 || strings.Count(out, "yes") != 3 || !strings.Contains(out, "(leader)") {
			return fmt.Errorf("members list: exit %d:\n%s%s", code, out, stderr)
		}
		return nil
	})
	t.Logf("members list:\n%s", out)

	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"add without arguments", []string{"token", "members", "add", "--servers", servers}, 2, []string{"want ID RAFTADDR APIADDR"}},
		{"add with a bad raft address", []string{"token", "members", "add", "n4", "nohostport", "http://127.0.0.1:1", "--servers", servers}, 2, []string{"not HOST:PORT"}},
		{"add of a node that does not run", []string{"token", "members", "add", "n4", "127.0.0.1:1", "http://127.0.0.1:1", "--servers", servers}, 1, []string{"refused", "no node answers", "--join"}},
		{"remove without an id", []string{"token", "members", "remove", "--servers", servers}, 2, []string{"exactly one member ID"}},
		{"unknown subcommand", []string{"token", "members", "promote", "n1"}, 2, []string{"use list, add or remove"}},
	} {
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

	// A fourth node, started to join on ports of its own choosing (it is
	// not restarted), added with the command, which waits until the leader
	// promoted it; then removed again.
	n4, err := tokenservice.Start(context.Background(), tokenservice.Config{
		Config: raftstore.Config{
			ID:       "n4",
			DataDir:  t.TempDir(),
			RaftAddr: "127.0.0.1:0",
			APIAddr:  "127.0.0.1:0",
			Join:     c.APIURLs(),
			Logger:   testutil.Logger(t).With("node", "n4"),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n4.Kill)
	raft4, api4 := n4.RaftAddr(), n4.APIURL()
	if strings.HasSuffix(raft4, ":0") || strings.HasSuffix(api4, ":0") {
		t.Fatalf("n4 reports raft %s, api %s; want the ports it was given", raft4, api4)
	}
	code, out, stderr := runCLI(t, "token", "members", "add", "n4", raft4, api4, "--servers", servers)
	if code != 0 || !strings.Contains(out, "n4 added as a non-voter") || !strings.Contains(out, "n4 caught up and is a voter") {
		t.Fatalf("members add: exit %d:\n%s%s", code, out, stderr)
	}
	code, out, _ = runCLI(t, "token", "members", "list", "--servers", servers, "--json")
	var ms tokenapi.Members
	if err := json.Unmarshal([]byte(out), &ms); code != 0 || err != nil || len(ms.Members) != 4 || ms.ClusterID == "" {
		t.Fatalf("members list --json: exit %d, %v:\n%s", code, err, out)
	}
	code, out, stderr = runCLI(t, "token", "members", "remove", "n4", "--servers", servers)
	if code != 0 || strings.TrimSpace(out) != "n4 removed" {
		t.Fatalf("members remove: exit %d:\n%s%s", code, out, stderr)
	}
	tokenservicetest.Mint(t, c.Client(t), 3)
}
