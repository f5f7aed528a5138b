package lockclient

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Per-node state of one fan-out.
const (
	statePending uint8 = iota
	stateOK            // granted, extended or deleted
	stateRefused       // key absent or holding another client's value
	stateFailed        // error or no answer within the node timeout
)

// tally collects the replies of one request sent to every node.
type tally struct {
	state  []uint8
	wrote  []bool // failed, but the request may have reached the node (not a failed dial)
	ok     int
	no     int // refused + failed
	errs   []error
	ctxErr error
}

func (t *tally) names(c *Client, s uint8) []string {
	var out []string
	for i, st := range t.state {
		if st == s {
			out = append(out, c.nodes[i].name)
		}
	}
	return out
}

// fanout sends one request to every node at once and counts the replies
// as they arrive. With all false it returns as soon as a quorum said yes or
// a quorum can no longer be reached; with all true it waits for every node. Nodes that have not answered within the
// node timeout count as failed. A done ctx stops the wait (the requests
// still go out) and is reported in ctxErr.
func (c *Client) fanout(ctx context.Context, kind opKind, key, value string, all bool) *tally {
	n := len(c.nodes)
	t := &tally{state: make([]uint8, n), wrote: make([]bool, n)}
	out := make(chan reply, n)
	deadline := time.Now().Add(c.opts.nodeTimeout)
	ops := make([]op, n)
	for i, nd := range c.nodes {
		o := &ops[i]
		*o = op{kind: kind, key: key, value: value, ttl: c.opts.ttl, deadline: deadline, node: i, out: out}
		if n == 1 {
			nd.do(o)
		} else {
			nd.submit(o)
		}
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for range n {
		if !all && (t.ok >= c.quorum || t.no > n-c.quorum) {
			break
		}
		var r reply
		select {
		case r = <-out:
		default:
			if timer == nil {
				timer = time.NewTimer(time.Until(deadline))
			}
			select {
			case r = <-out:
			case <-timer.C:
				for i, st := range t.state {
					if st == statePending {
						t.state[i] = stateFailed
						t.wrote[i] = true
						t.no++
						t.errs = append(t.errs, newNodeError(c.nodes[i].name,
							fmt.Errorf("no answer within %v: %w", c.opts.nodeTimeout, context.DeadlineExceeded)))
					}
				}
				return t
			case <-ctx.Done():
				t.ctxErr = ctx.Err()
				return t
			}
		}
		switch {
		case r.err != nil:
			t.state[r.node] = stateFailed
			t.wrote[r.node] = !dialFailed(r.err)
			t.no++
			t.errs = append(t.errs, newNodeError(c.nodes[r.node].name, r.err))
		case r.ok:
			t.state[r.node] = stateOK
			t.ok++
		default:
			t.state[r.node] = stateRefused
			t.no++
		}
	}
	return t
}

// notAcquired builds the error for a failed grant, confirmation or
// refresh. Expired says that a majority answered yes, but after the
// validity; a context that ended first is not that.
func (c *Client) notAcquired(resource string, step uint8, t *tally) error {
	e := &NotAcquiredError{
		step:     step,
		Resource: resource,
		Granted:  t.names(c, stateOK),
		Taken:    t.names(c, stateRefused),
		Failed:   t.names(c, stateFailed),
		Expired:  t.ctxErr == nil && t.ok >= c.quorum,
		Nodes:    len(c.nodes),
		Quorum:   c.quorum,
		NodeErrs: errors.Join(t.errs...),
	}
	if t.ctxErr != nil {
		return errors.Join(e, t.ctxErr)
	}
	return e
}

// grant runs one Redlock round: SET NX PX on every node, success on a
// majority within the validity (TTL − elapsed − drift). On failure it
// deletes the key wherever it may have been set. It returns the validity on
// c.clk.
func (c *Client) grant(ctx context.Context, resource, key, value string) (time.Duration, error) {
	start := c.clk.now()
	t := c.fanout(ctx, opAcquire, key, value, false)
	validUntil := start + c.opts.ttl - c.drift
	if t.ctxErr == nil && t.ok >= c.quorum && c.clk.now() < validUntil {
		return validUntil, nil
	}
	c.cleanupAfter(key, value, t)
	return 0, c.notAcquired(resource, stepGrant, t)
}

type extendResult struct {
	validUntil time.Duration // on c.clk
	tally      *tally
}

// extend resets the TTL of the key on every node where it still holds
// value; it succeeds when a majority did so within the new validity. step
// is stepConfirm or stepRefresh, for the error.
func (c *Client) extend(ctx context.Context, step uint8, resource, key, value string) (*extendResult, error) {
	start := c.clk.now()
	t := c.fanout(ctx, opExtend, key, value, false)
	validUntil := start + c.opts.ttl - c.drift
	res := &extendResult{validUntil: validUntil, tally: t}
	if t.ctxErr == nil && t.ok >= c.quorum && c.clk.now() < validUntil {
		return res, nil
	}
	return res, c.notAcquired(resource, step, t)
}

// cleanup deletes the key where it holds value (compare-and-delete) on every
// node, and waits for the answers (at most the node timeout). Every node
// means every node: one that answered "held by another client" may hold
// this very value (a SET whose reply was lost and that a client library
// resent finds the key it set itself), and one that failed or did not
// answer in time may have applied the SET all the same. It ignores the
// caller's context: a lock half taken must not stay behind.
//
// A node that may have received a write without answering (paused, slow,
// its link cut) can apply it after the release was answered or given up
// on: a release sent on another connection does not queue behind a SET
// whose connection timed out. Such nodes get a late cleanup (lateRelease).
func (c *Client) cleanup(key, value string) *tally {
	return c.cleanupAfter(key, value, nil)
}

// cleanupAfter is cleanup after the grant round grant (nil when the grant
// succeeded and a later step failed): a node whose SET got no answer is
// suspect even when the release answered, since the SET may come after it.
func (c *Client) cleanupAfter(key, value string, grant *tally) *tally {
	t := c.fanout(context.Background(), opRelease, key, value, true)
	for i, nd := range c.nodes {
		if t.state[i] == stateOK {
			continue // deleted: the SET had been applied before
		}
		suspect := t.state[i] == stateFailed && t.wrote[i]
		if grant != nil && (grant.state[i] == statePending || (grant.state[i] == stateFailed && grant.wrote[i])) {
			suspect = true
		}
		if suspect {
			nd.lateRelease(key, value, c.opts.ttl)
		}
	}
	return t
}
