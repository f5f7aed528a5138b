package raftstore

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// errVoteWithheld answers the vote requests of a node whose votes are gated.
var errVoteWithheld = errors.New("raftstore: vote withheld: this node joined as a non-voter and has not been promoted")

// voteGate sits between Raft and its transport on a node that joined with
// an empty data directory. Until the node sees itself as a voter in its own
// configuration, it answers vote and pre-vote requests (and leadership
// transfers) with an error instead of passing them to Raft.
//
// hashicorp/raft grants a vote to any candidate when it has no
// configuration, and counts a response by the address it asked: an empty
// node at a lost member's address would otherwise be counted as that
// member, with none of what the member had promised (see DESIGN.md,
// "Joining"). A node is promoted only once it has caught up, so when the
// gate opens its log holds everything committed before its promotion.
type voteGate struct {
	raft.Transport
	in   <-chan raft.RPC
	out  chan raft.RPC
	done chan struct{}
	wg   sync.WaitGroup

	open    atomic.Bool
	mu      sync.Mutex
	isVoter func() bool // set once Raft runs
	opened  func()      // called once, when the gate opens
}

// newVoteGate wraps trans; the gate starts closed.
func newVoteGate(trans raft.Transport) *voteGate {
	g := &voteGate{Transport: trans, in: trans.Consumer(), out: make(chan raft.RPC), done: make(chan struct{})}
	g.wg.Add(1)
	go g.run()
	return g
}

// start tells the gate how to learn that the node became a voter, and what
// to do once it did.
func (g *voteGate) start(isVoter func() bool, opened func()) {
	g.mu.Lock()
	g.isVoter, g.opened = isVoter, opened
	g.mu.Unlock()
}

// Consumer is the channel Raft reads RPCs from.
func (g *voteGate) Consumer() <-chan raft.RPC { return g.out }

// RequestPreVote passes on the wrapped transport's pre-vote support, so
// that Raft keeps pre-vote on.
func (g *voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return g.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

// Close stops the gate and closes the wrapped transport.
func (g *voteGate) Close() error {
	select {
	case <-g.done:
	default:
		close(g.done)
	}
	g.wg.Wait()
	if c, ok := g.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}

// withheld reports whether rpc is a request this node must not answer yet.
func (g *voteGate) withheld(rpc raft.RPC) bool {
	switch rpc.Command.(type) {
	case *raft.RequestVoteRequest, *raft.RequestPreVoteRequest, *raft.TimeoutNowRequest:
		return !g.refresh()
	}
	return false
}

// refresh opens the gate if the node has become a voter, and reports
// whether the gate is open. The gate never closes again.
func (g *voteGate) refresh() bool {
	if g.open.Load() {
		return true
	}
	g.mu.Lock()
	isVoter, opened := g.isVoter, g.opened
	g.mu.Unlock()
	if isVoter == nil || !isVoter() {
		return false
	}
	if g.open.CompareAndSwap(false, true) && opened != nil {
		opened()
	}
	return true
}

func (g *voteGate) run() {
	defer g.wg.Done()
	for {
		select {
		case <-g.done:
			return
		case rpc := <-g.in:
			if g.withheld(rpc) {
				rpc.Respond(nil, errVoteWithheld)
				continue
			}
			select {
			case g.out <- rpc:
			case <-g.done:
				return
			}
		}
	}
}
