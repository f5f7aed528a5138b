package demo

import (
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenservice"
)

// locks is a client's lock service: lockclient over the Redis server(s),
// with fencing tokens from the token service.
type locks struct {
	tokens *tokenservice.Client
	*lockclient.Client
}

func newLocks(c *ClientConfig) (*locks, error) {
	tc, err := tokenservice.NewClient(c.Tokens)
	if err != nil {
		return nil, err
	}
	opts := []lockclient.Option{lockclient.WithTTL(c.TTL), lockclient.WithKeyPrefix(c.KeyPrefix),
		lockclient.WithRetry(lockclient.FixedRetry(20 * time.Millisecond))}
	lc, err := lockclient.Dial(c.Redis, tc, opts...)
	if err != nil {
		tc.Close()
		return nil, err
	}
	return &locks{tokens: tc, Client: lc}, nil
}

func (l *locks) Close() error {
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
