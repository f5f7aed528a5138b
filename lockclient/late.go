package lockclient

import (
	"context"
	"errors"
	"net"
	"time"
)

// A late cleanup: a failed attempt's SET that got no answer may still be
// applied by its node (a master paused with SIGSTOP reads it when it
// resumes), after the release sent to undo it, which travels on another
// connection and may be read first. The node's late worker sends the
// release again, with backoff, until the node has answered it twice (the
// second time on a request sent after the first answer came: by then the
// node has read everything it had received before it answered the first),
// until it deletes the key, or until the key's TTL would have ended it
// anyway. Close stops it.

type lateKey struct{ key, value string }

type lateEntry struct {
	until    time.Time // the key expires by itself by then
	answered int       // answers in a row
}

// lateMax bounds the entries a node keeps; beyond it the oldest are left
// to their TTL.
const lateMax = 4096

// lateRelease queues a late cleanup of key holding value on n.
func (n *node) lateRelease(key, value string, ttl time.Duration) {
	n.lateMu.Lock()
	if n.late == nil {
		n.late = make(map[lateKey]*lateEntry)
	}
	if len(n.late) >= lateMax {
		var oldest lateKey
		var first time.Time
		for k, e := range n.late {
			if first.IsZero() || e.until.Before(first) {
				oldest, first = k, e.until
			}
		}
		delete(n.late, oldest)
	}
	n.late[lateKey{key, value}] = &lateEntry{until: time.Now().Add(ttl)}
	start := !n.lateRunning
	n.lateRunning = true
	n.lateMu.Unlock()
	if start && !n.spawn(n.lateLoop) {
		n.lateMu.Lock()
		n.lateRunning = false
		n.lateMu.Unlock()
	}
}

func (n *node) lateLoop() {
	wait := 20 * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-n.closed:
			n.lateMu.Lock()
			n.lateRunning = false
			n.lateMu.Unlock()
			return
		case <-timer.C:
		}
		n.lateMu.Lock()
		now := time.Now()
		var keys []lateKey
		for k, e := range n.late {
			if now.After(e.until) {
				delete(n.late, k)
				continue
			}
			keys = append(keys, k)
		}
		if len(keys) == 0 {
			n.lateRunning = false
			n.lateMu.Unlock()
			return
		}
		n.lateMu.Unlock()
		progress := n.lateRound(keys)
		if progress {
			wait = 20 * time.Millisecond
		} else if wait *= 2; wait > time.Second {
			wait = time.Second
		}
		timer.Reset(wait)
	}
}

// lateRound sends the release for keys in one pipeline and counts the
// answers; it reports whether the node answered.
func (n *node) lateRound(keys []lateKey) bool {
	ctx, cancel := context.WithTimeout(n.base, n.timeout)
	defer cancel()
	pipe := n.rdb.Pipeline()
	cmds := make([]interface{ Int64() (int64, error) }, len(keys))
	for i, k := range keys {
		cmds[i] = releaseScript.Eval(ctx, pipe, []string{k.key}, k.value)
	}
	_, _ = pipe.Exec(ctx)
	answered := false
	n.lateMu.Lock()
	defer n.lateMu.Unlock()
	for i, k := range keys {
		e := n.late[k]
		if e == nil {
			continue
		}
		v, err := cmds[i].Int64()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) {
				e.answered = 0
				continue
			}
		}
		answered = true
		e.answered++
		if v == 1 || e.answered >= 2 {
			delete(n.late, k)
		}
	}
	return answered
}

// dialFailed says whether err is a failure to connect: nothing was sent.
func dialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
