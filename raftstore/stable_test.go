package raftstore

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// slowStable is a stable store whose SetUint64 takes a while; entered, when
// set, is closed once the first write is inside it, and writes counts the
// writes that ended.
type slowStable struct {
	raft.StableStore
	mu      sync.Mutex
	closed  bool
	writes  int
	entered chan struct{}
	once    sync.Once
}

func (s *slowStable) SetUint64(key []byte, val uint64) error {
	if s.entered != nil {
		s.once.Do(func() { close(s.entered) })
	}
	time.Sleep(100 * time.Millisecond)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		panic("a write reached the closed store") // what bolt's error makes Raft do
	}
	s.writes++
	return nil
}

// close waits for a write already running in the store, and a write that
// comes after close never reaches the store nor returns: a stopped node
// neither answers a heartbeat nor crashes on it.
func TestClosingStableWaitsThenHolds(t *testing.T) {
	inner := &slowStable{entered: make(chan struct{})}
	c := &closingStable{StableStore: inner}
	done := make(chan error, 1)
	go func() {
		done <- c.SetUint64([]byte("CurrentTerm"), 2)
	}()
	<-inner.entered // the write is inside the store (a sleep before close raced it under load)
	c.close()
	inner.mu.Lock()
	ended := inner.writes
	inner.closed = true // what Store.Kill does next: bolt.Close
	inner.mu.Unlock()
	if ended != 1 {
		t.Fatal("close returned before the running write ended")
	}
	// The write's caller gets its answer (it sends it after the store
	// returned, so it is waited for, not polled).
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the running write: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the running write never returned")
	}
	late := make(chan struct{})
	go func() {
		_ = c.SetUint64([]byte("CurrentTerm"), 3)
		close(late)
	}()
	select {
	case <-late:
		t.Fatal("a write after close returned")
	case <-time.After(300 * time.Millisecond):
	}
}
