package raftstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// storeProber answers a joining node's questions from a Store directly,
// as tokenservice does over HTTP.
type storeProber struct{ leader *Store }

func (p storeProber) State(ctx context.Context, api string) (NodeState, error) {
	return p.leader.State(), nil
}

func (p storeProber) Configuration(ctx context.Context, api string) (Configuration, error) {
	return p.leader.Configuration(ctx)
}

// fastConfig is node id's configuration with short Raft timeouts and no
// network: give it a Layer (bindLayer) before each Open.
func fastConfig(t testing.TB, id, dir string) Config {
	return Config{
		ID: id, DataDir: dir, APIAddr: "http://" + id, Logger: testutil.Logger(t).With("node", id),
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 150 * time.Millisecond,
	}
}

// A node that joins withholds its votes until it is promoted, also across
// a restart before the promotion, and records the promotion.
func TestJoinGatesVotesUntilPromoted(t *testing.T) {
	testutil.NeedServices(t)
	a := singleNode(t, t.TempDir(), "", true)
	defer a.Close()
	ctx := context.Background()
	testutil.Eventually(t, 10*time.Second, "a cluster id", func() bool { return a.fsm.clusterID() != "" })
	if _, err := a.Allocate(ctx, 7); err != nil {
		t.Fatal(err)
	}
	dirB := t.TempDir()
	cfgB := fastConfig(t, "n2", dirB)
	cfgB.Join, cfgB.Probe = []string{"http://n1"}, storeProber{a}
	cfgB.Layer = bindLayer(t, "", nil)
	addrB := cfgB.Layer.Addr().String()
	cfgB.RaftAddr = addrB
	b, err := Open(cfgB)
	if err != nil {
		t.Fatal(err)
	}
	if b.gate == nil || b.gate.refresh() {
		t.Fatal("a joining node's votes are not withheld")
	}
	if id, _ := readIdentity(dirB); !id.Joining || !id.RaftStarted {
		t.Fatalf("identity of a joining node = %+v; want joining and raft_started", id)
	}
	// Restarted before its promotion, it still withholds its votes.
	b.Kill()
	cfgB.Layer = bindLayer(t, addrB, nil)
	if b, err = Open(cfgB); err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	if b.gate == nil || b.gate.refresh() {
		t.Fatal("a joining node restarted before its promotion votes")
	}
	// Without members to ask, a joining node that holds nothing yet
	// cannot start.
	b.Kill()
	noJoin := cfgB
	noJoin.Join, noJoin.Layer = nil, bindLayer(t, addrB, nil)
	if _, err := Open(noJoin); !errors.Is(err, ErrNoFounding) {
		t.Fatalf("Open of a joining node without Join = %v; want ErrNoFounding", err)
	}
	cfgB.Layer = bindLayer(t, addrB, nil)
	if b, err = Open(cfgB); err != nil {
		t.Fatal(err)
	}
	if err := a.AddNonvoter(ctx, tokenapi.Peer{ID: "n2", RaftAddr: addrB, APIAddr: "http://n2"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "n2 to catch up", func() bool { return b.LastToken() == 7 })
	if b.gate.refresh() {
		t.Fatal("a non-voter's votes are no longer withheld")
	}
	if err := a.Promote(ctx, "n2"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "n2's gate to open", func() bool { return b.gate.open.Load() })
	testutil.Eventually(t, 10*time.Second, "the promotion recorded", func() bool {
		id, _ := readIdentity(dirB)
		return id != nil && !id.Joining && id.ClusterID == a.fsm.clusterID()
	})
	// A data dir that held Raft state and lost its log counts as lost.
	b.Kill()
	for _, f := range []string{"raft.db"} {
		if err := removeFile(dirB, f); err != nil {
			t.Fatal(err)
		}
	}
	cfgB.Layer = bindLayer(t, addrB, nil)
	if _, err := Open(cfgB); !errors.Is(err, ErrDataDirLost) {
		t.Fatalf("Open of a data dir without its log = %v; want ErrDataDirLost", err)
	}
	// An empty data dir given neither voters nor members to join.
	cfg3 := fastConfig(t, "n3", t.TempDir())
	cfg3.Layer = bindLayer(t, "", nil)
	if _, err := Open(cfg3); !errors.Is(err, ErrNoFounding) {
		t.Fatalf("Open of an empty data dir without peers or join = %v; want ErrNoFounding", err)
	}
}
