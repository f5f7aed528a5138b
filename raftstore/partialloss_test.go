package raftstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"go.etcd.io/bbolt"
)

// compactingNode opens node n1 on a one-node cluster (a new one when
// addr is "") that keeps only two entries after a snapshot, so that a
// snapshot compacts the log.
func compactingNode(t *testing.T, dir, addr string) (*Store, error) {
	t.Helper()
	cfg := fastConfig(t, "n1", dir)
	cfg.Layer = bindLayer(t, addr, nil)
	cfg.TrailingLogs = 2
	cfg.SnapshotInterval = time.Hour // only the snapshots the test takes
	if addr == "" {
		cfg.Peers = []Server{{ID: "n1", RaftAddr: cfg.Layer.Addr().String(), APIAddr: cfg.APIAddr}}
	}
	return Open(cfg)
}

// usedNode runs a new one-node cluster in dir until its cluster id is
// recorded, allocates 10 tokens in as many entries, takes a snapshot
// (which compacts the log), allocates 3 more and stops; it returns the
// node's Raft address.
func usedNode(t *testing.T, dir string) string {
	t.Helper()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	testutil.Eventually(t, 10*time.Second, "the cluster id recorded", func() bool {
		id, _ := readIdentity(dir)
		return id != nil && id.ClusterID != ""
	})
	ctx := context.Background()
	for range 10 {
		if _, err := s.Allocate(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := s.Allocate(ctx, 1); err != nil {
			t.Fatal(err)
		}
	}
	addr := s.RaftAddr()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// reopenRefused reopens n1 on dir and wants it refused as lost.
func reopenRefused(t *testing.T, dir, addr string, wants ...string) error {
	t.Helper()
	s, err := compactingNode(t, dir, addr)
	if err == nil {
		s.Kill()
		t.Fatalf("n1 started from a data dir that lost part of its state")
	}
	if !errors.Is(err, ErrDataDirLost) {
		t.Fatalf("Open = %v, want ErrDataDirLost", err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("refusal %q does not say %q", err, w)
		}
	}
	t.Log(err)
	return err
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// raft.db deleted, snapshots kept: the node used to resume from the
// snapshot at term 0, a voter that had forgotten its votes and every entry
// after the snapshot.
func TestLostRaftDBWithSnapshotsRefused(t *testing.T) {
	dir := t.TempDir()
	addr := usedNode(t, dir)
	if err := os.Remove(filepath.Join(dir, "raft.db")); err != nil {
		t.Fatal(err)
	}
	reopenRefused(t, dir, addr, "raft.db", "gone or empty", "snapshots up to index", "replace the node")
	// Refused again: the failed start left nothing that makes it look whole.
	reopenRefused(t, dir, addr, "gone or empty")
}

// Snapshots deleted while the log starts after index 1: the entries
// before it are nowhere.
func TestLostSnapshotsRefused(t *testing.T) {
	dir := t.TempDir()
	addr := usedNode(t, dir)
	if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	reopenRefused(t, dir, addr, "no snapshot holds entries 1 to", "the snapshots are gone")
}

// A raft.db older than the snapshots (put back from a copy): its term is
// below the snapshot's.
func TestOldRaftDBRefused(t *testing.T) {
	dir := t.TempDir()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	addr := s.RaftAddr()
	s.Close()
	old := filepath.Join(t.TempDir(), "raft.db")
	copyFile(t, filepath.Join(dir, "raft.db"), old)
	// A new term (every restart of a one-node cluster elects again), and a
	// snapshot taken in it.
	s, err = compactingNode(t, dir, addr)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	if _, err := s.Allocate(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	copyFile(t, old, filepath.Join(dir, "raft.db"))
	reopenRefused(t, dir, addr, "older than its snapshots")
}

// A raft.db copied from a node of the same id in another cluster.
func TestForeignRaftDBRefused(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	addr := usedNode(t, dir)
	usedNode(t, other)
	copyFile(t, filepath.Join(other, "raft.db"), filepath.Join(dir, "raft.db"))
	err := reopenRefused(t, dir, addr, "copied from elsewhere")
	if !errors.Is(err, ErrForeignDataDir) {
		t.Fatalf("Open = %v, want it to wrap ErrForeignDataDir too", err)
	}
}

// Snapshots copied from another cluster into a directory whose raft.db is
// whole (a log from index 1) and younger: only the cluster id tells.
func TestForeignSnapshotsRefused(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cluster id recorded", func() bool {
		id, _ := readIdentity(dir)
		return id != nil && id.ClusterID != ""
	})
	addr := s.RaftAddr()
	s.Close()
	usedNode(t, other)
	if err := os.RemoveAll(filepath.Join(dir, "snapshots")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(dir, "snapshots"), os.DirFS(filepath.Join(other, "snapshots"))); err != nil {
		t.Fatal(err)
	}
	err = reopenRefused(t, dir, addr, "holds the state of cluster")
	if !errors.Is(err, ErrForeignDataDir) {
		t.Fatalf("Open = %v, want it to wrap ErrForeignDataDir too", err)
	}
}

// cluster.json lost while raft.db survives: whose state raft.db holds is
// unknown to the directory, and the node is refused rather than given a
// new data directory id.
func TestLostClusterJSONRefused(t *testing.T) {
	dir := t.TempDir()
	addr := usedNode(t, dir)
	if err := os.Remove(filepath.Join(dir, identityFile)); err != nil {
		t.Fatal(err)
	}
	reopenRefused(t, dir, addr, "no cluster.json")
}

// raft.db records whose state it holds from the founding on, with the
// cluster id once known; a directory written before records existed gets
// one on its first start and resumes.
func TestRecordInRaftDB(t *testing.T) {
	dir := t.TempDir()
	s, err := compactingNode(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the cluster id in raft.db's record", func() bool {
		r, err := readRecord(s.bolt)
		return err == nil && r != nil && r.ClusterID != "" && r.ClusterID == s.fsm.clusterID()
	})
	id, _ := readIdentity(dir)
	if r, _ := readRecord(s.bolt); *r != recordOf(*id) {
		t.Fatalf("raft.db's record %+v, cluster.json %+v", *r, *id)
	}
	if _, err := s.Allocate(context.Background(), 4); err != nil {
		t.Fatal(err)
	}
	addr := s.RaftAddr()
	s.Close()

	// As an earlier version left it: no record.
	db, err := bbolt.Open(filepath.Join(dir, "raft.db"), 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("conf")).Delete(recordKey) }); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err = compactingNode(t, dir, addr)
	if err != nil {
		t.Fatalf("a data dir without a record did not resume: %v", err)
	}
	defer s.Close()
	testutil.Eventually(t, 10*time.Second, "log replayed", func() bool { return s.LastToken() == 4 })
	if r, err := readRecord(s.bolt); err != nil || r == nil || *r != recordOf(*id) {
		t.Fatalf("after the first start without a record, raft.db's record = %+v, %v; want %+v", r, err, recordOf(*id))
	}
}
