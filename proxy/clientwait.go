package proxy

import (
	"net"
	"sync/atomic"
	"time"
)

// Waiting on the client inside a transaction. The idle-in-transaction limit
// (Config.IdleInTransactionTimeout) first timed only a session whose every
// request was answered, from its last ReadyForQuery. A client holding a
// fence can leave the server waiting on it in other ways, none of which
// PostgreSQL's own limit (which a session may SET to 0) or that rule saw:
//
//   - stopping in the middle of a message: a message that fits the read
//     buffer is forwarded only once it is whole, so until then nothing of it
//     is tracked and the session is idle as before; a larger one, streamed
//     through, is marked as being received;
//   - an extended batch with no Sync: the server answered what the client
//     flushed and waits for more (or, after an error, for the Sync);
//   - COPY FROM STDIN with no CopyDone or CopyFail sent: the server waits
//     for data;
//   - not reading: the server blocks sending a result, the proxy's write to
//     the client blocks.
//
// The gate counts its reads from and writes to the client (odd while one
// is in progress). The stall timer then also runs while a transaction is
// open and the server is not idle, every quarter of the limit (after a
// first look a limit after the ReadyForQuery); when it sees
// the frontend pump blocked in the same read of the client, with the
// server owing the client nothing (one of the states above), or the
// backend pump blocked in the same write to the client, for the limit, it
// closes the session. A request the client waits on and the server works
// at (a long statement, a COMMIT) is never timed: the frontend pump may be
// blocked reading the client then, but the tracker holds an answer owed.
//
// Such a session is closed bare, as a lost link would be: after an
// unsynced batch the transaction status is not known (an Execute of COMMIT
// may have been answered), in a COPY or a streamed message a request is
// half in flight, and a client that does not read would not get a message
// anyway.

// clientIO counts a session's reads from and writes to its client: each
// counter is odd while a read (write) is in progress. Only the pumps read
// and write through it.
type clientIO struct {
	net.Conn
	reads, writes atomic.Uint64
}

func (c *clientIO) Read(p []byte) (int, error) {
	c.reads.Add(1)
	n, err := c.Conn.Read(p)
	c.reads.Add(1)
	return n, err
}

func (c *clientIO) Write(p []byte) (int, error) {
	c.writes.Add(1)
	n, err := c.Conn.Write(p)
	c.writes.Add(1)
	return n, err
}

// watchClient puts the session's client reads and writes through a
// clientIO when the idle-in-transaction limit is on.
func (s *session) watchClient(ref *connRef) {
	if s.clientIO != nil {
		s.clientIO.Conn = ref.Conn
		ref.Conn = s.clientIO
	}
}

// awaitWhole waits until the next message (body length n) is buffered
// whole, when it fits the buffer, so that it is tracked (and forwarded)
// only once it is complete: a client that stops mid-message leaves the
// session idle. It reports whether the message is too large for that and
// is streamed through instead.
func (s *session) awaitWhole(n int) (streamed bool, err error) {
	if 5+n > s.clientFrames.r.Size() {
		return true, nil
	}
	_, err = s.clientFrames.r.Peek(5 + n)
	return false, err
}

// setReceiving marks whether the frontend pump is streaming a message it
// has pushed, not yet received whole.
func (t *tracker) setReceiving(on bool) {
	t.mu.Lock()
	t.receiving = on
	t.mu.Unlock()
}

// awaitsClient reports whether the server owes the client no answer and
// waits on it, inside a transaction that is not idle by quiet(): a
// streamed message half received with nothing before it unanswered, a COPY
// FROM STDIN whose end was not sent, an extended batch whose messages were
// all answered, or the skip to a Sync that was not sent. Call with mu held.
func (t *tracker) awaitsClient() bool {
	switch {
	case t.receiving:
		return len(t.queue)-t.head == 1
	case t.copyIn:
		for _, r := range t.queue[t.head:] {
			if r.typ == 'c' || r.typ == 'f' {
				return false // the COPY's end is sent: the server finishes it
			}
		}
		return true
	case t.skipping:
		return t.pending == 0
	case t.pending > 0:
		return false
	}
	for _, r := range t.queue[t.head:] {
		if r.typ != 'c' && r.typ != 'f' { // those the server drops unanswered
			return false
		}
	}
	return true
}

// checkClient runs from closeIfStalled, with mu held, while a transaction
// is open and the session is not quiet. reads and writes are the clientIO
// counters. When the frontend pump has been in the same read since an
// earlier check, for the limit, and the server waits on the client
// throughout (see awaitsClient: with no read done nothing was pushed, so
// once true it stays true), or the backend pump has been in the same write
// for the limit, it marks the session closing and calls closed(true).
// It returns when to check again.
func (t *tracker) checkClient(reads, writes uint64, closed func(lost bool)) time.Duration {
	now := t.now()
	wait := t.checkEvery()
	overdue := func(seen *uint64, at *int64, cur uint64, cond bool) bool {
		if cur&1 == 0 || !cond {
			*seen = 0
			return false
		}
		if *seen != cur {
			*seen, *at = cur, now
			return false
		}
		left := t.stallLimit - time.Duration(now-*at)
		if left <= 0 {
			return true
		}
		wait = min(wait, left)
		return false
	}
	blockedRead := overdue(&t.watchRead, &t.watchReadAt, reads, t.awaitsClient())
	blockedWrite := overdue(&t.watchWrite, &t.watchWriteAt, writes, true)
	if !blockedRead && !blockedWrite {
		return wait
	}
	t.stalledOnClient = "read"
	if blockedWrite {
		t.stalledOnClient = "write"
	}
	t.closing = true
	closed(true)
	return 0
}

// stalledOn says what the client was blocked in when the session closed.
func (t *tracker) stalledOn() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stalledOnClient
}

// checkEvery is how often the stall timer looks at a session in a
// transaction, after the first look a limit after its ReadyForQuery: a
// session waiting on its client is closed between the limit and twice the
// limit after it began to wait.
func (t *tracker) checkEvery() time.Duration { return max(t.stallLimit/4, time.Millisecond) }
