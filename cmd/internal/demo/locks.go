package demo

import (
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
)

// Locks is the lock service of the demos' client and worker processes:
// lockclient over Redis (one server, or the Redlock masters), with fencing
// tokens from the token service.
type Locks struct {
	tokens *tokenclient.Client
	*lockclient.Client
}

// DialLocks connects to the Redis servers and the token service's nodes.
func DialLocks(redis, tokens []string, opts ...lockclient.Option) (*Locks, error) {
	tc, err := tokenclient.NewClient(tokens)
	if err != nil {
		return nil, err
	}
	lc, err := lockclient.Dial(redis, tc, opts...)
	if err != nil {
		tc.Close()
		return nil, err
	}
	return &Locks{tokens: tc, Client: lc}, nil
}

// Close closes the lock client, then the token client.
func (l *Locks) Close() error {
	err := l.Client.Close()
	l.tokens.Close()
	return err
}

// held is what a careful client checks before writing: the lease is not
// known lost and its validity has not passed.
func held(l *lockclient.Lock) bool {
	select {
	case <-l.Done():
		return false
	default:
		return time.Now().Before(l.ValidUntil())
	}
}
