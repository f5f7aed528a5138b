package raftstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
)

// bindLayer returns a plain TCP Layer on addr, dialling with dial (a plain
// dial when nil): "" binds 127.0.0.1:0 for a new node; the address of a
// stopped node binds it again, retried for up to 10s while a socket of
// its last run still closes.
func bindLayer(t testing.TB, addr string, dial DialFunc) Layer {
	t.Helper()
	testutil.NeedServices(t)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			t.Cleanup(func() { ln.Close() })
			return NewTCPLayer(ln, dial)
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// singleNode opens node n1 on addr ("" for a new address; its RaftAddr to
// reopen it), founding a one-node cluster when boot is set.
func singleNode(t testing.TB, dir, addr string, boot bool) *Store {
	t.Helper()
	testutil.NeedServices(t)
	cfg := Config{
		ID: "n1", DataDir: dir, Layer: bindLayer(t, addr, nil), APIAddr: "http://127.0.0.1:7101", Logger: testutil.Logger(t),
		HeartbeatTimeout: 200 * time.Millisecond, ElectionTimeout: 200 * time.Millisecond, LeaderLeaseTimeout: 150 * time.Millisecond,
	}
	if boot {
		cfg.Peers = []tokenapi.Peer{{ID: "n1", RaftAddr: cfg.Layer.Addr().String(), APIAddr: "http://127.0.0.1:7101"}}
	}
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "n1 to lead", s.IsLeader)
	return s
}

func TestStoreAllocateCloseResume(t *testing.T) {
	dir := t.TempDir()
	s := singleNode(t, dir, "", true)
	addr := s.RaftAddr()
	ctx := context.Background()
	r, err := s.Allocate(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if r.First != 1 || r.Count != 5 || r.Leader != "n1" || r.Index == 0 {
		t.Fatalf("Allocate(5) = %+v", r)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := s.Allocate(ctx, 1); err == nil {
		t.Fatal("Allocate after Close succeeded")
	}

	// Reopened without bootstrap voters, the node resumes from its data dir.
	s = singleNode(t, dir, addr, false)
	defer s.Close()
	testutil.Eventually(t, 10*time.Second, "log replayed", func() bool { return s.LastToken() == 5 })
	r, err = s.Allocate(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r.First != 6 {
		t.Fatalf("first token after resume = %d, want 6", r.First)
	}
	if st := s.Status(); st.LeaderID != "n1" || st.LeaderAPI != "http://127.0.0.1:7101" || len(st.Members) != 1 {
		t.Fatalf("Status = %+v", st)
	}
}

func TestOpenRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	s := singleNode(t, dir, "", true)
	addr := s.RaftAddr()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Every case fails before the node listens.
	other := "127.0.0.1:0"
	cases := []struct {
		name string
		cfg  Config
		want error
	}{
		{"another node's data dir", Config{ID: "n2", DataDir: dir, RaftAddr: other}, ErrForeignDataDir},
		{"peers without this node", Config{ID: "n3", DataDir: t.TempDir(), RaftAddr: other,
			Peers: []tokenapi.Peer{{ID: "n1", RaftAddr: addr}}}, ErrBadConfig},
		{"peers with another address for this node", Config{ID: "n1", DataDir: t.TempDir(), RaftAddr: other,
			Peers: []tokenapi.Peer{{ID: "n1", RaftAddr: addr}}}, ErrBadConfig},
		{"missing id", Config{DataDir: t.TempDir(), RaftAddr: other}, ErrBadConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(tc.cfg)
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Open = %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	t.Run("raft port in use", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		fresh := filepath.Join(t.TempDir(), "d")
		_, err = Open(Config{ID: "n1", DataDir: fresh, RaftAddr: ln.Addr().String()})
		if !errors.Is(err, ErrAddrInUse) {
			t.Fatalf("Open = %v, want ErrAddrInUse", err)
		}
		if _, statErr := filepath.Glob(fresh); statErr != nil {
			t.Fatal(statErr)
		}
		if m, _ := filepath.Glob(fresh + "/*"); len(m) != 0 {
			t.Fatalf("failed Open left files behind: %v", m)
		}
	})
}

func BenchmarkStoreAllocate(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := singleNode(b, b.TempDir(), "", true)
			defer s.Close()
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.Allocate(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkStoreBatcherParallel(b *testing.B) {
	s := singleNode(b, b.TempDir(), "", true)
	defer s.Close()
	bt := NewBatcher(s.Allocate)
	defer bt.Close()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := bt.Next(context.Background(), 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func removeFile(dir, name string) error { return os.Remove(filepath.Join(dir, name)) }
