package bench

import "sync"

// Cleanup is a stack of undo functions run in reverse order of addition, at
// most once, from a deferred call in main (after an error, a panic or a
// Ctrl-C that cancelled the run's context).
type Cleanup struct {
	mu  sync.Mutex
	fns []func()
}

// Add pushes fn.
func (c *Cleanup) Add(fn func()) {
	c.mu.Lock()
	c.fns = append(c.fns, fn)
	c.mu.Unlock()
}

// Run calls the functions added so far, last first, and forgets them.
func (c *Cleanup) Run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}
