package raftstore

import (
	"sync"

	"github.com/hashicorp/raft"
)

// closingStable is the stable store (current term, last vote) Raft runs
// on: bolt, closed only once no call is running in it. hashicorp/raft
// answers heartbeats on the transport's connection goroutines, outside
// the loops Shutdown waits for; a heartbeat of a later term that passed
// Raft's shutdown check just before Shutdown writes the term to the stable
// store, and Raft panics when that write fails ("failed to save current
// term: database not open", seen once in a full test run). close waits for
// running calls; a call that comes after it never returns, as a process
// that was killed would never answer: answering, or failing the write,
// would let a stopped node acknowledge a term it did not persist, or crash
// the process that holds it.
type closingStable struct {
	raft.StableStore
	mu     sync.RWMutex
	closed bool
}

// enter reports the store open and holds it so until leave; after close
// it blocks forever.
func (c *closingStable) enter() {
	c.mu.RLock()
	if c.closed {
		c.mu.RUnlock()
		select {} // a stopped node never answers
	}
}

func (c *closingStable) leave() { c.mu.RUnlock() }

func (c *closingStable) Set(key, val []byte) error {
	c.enter()
	defer c.leave()
	return c.StableStore.Set(key, val)
}

func (c *closingStable) Get(key []byte) ([]byte, error) {
	c.enter()
	defer c.leave()
	return c.StableStore.Get(key)
}

func (c *closingStable) SetUint64(key []byte, val uint64) error {
	c.enter()
	defer c.leave()
	return c.StableStore.SetUint64(key, val)
}

func (c *closingStable) GetUint64(key []byte) (uint64, error) {
	c.enter()
	defer c.leave()
	return c.StableStore.GetUint64(key)
}

// close waits for the calls running in the store and makes later calls
// block; the caller then closes the store beneath.
func (c *closingStable) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
}
