package lostupdates

import (
	"time"

	"github.com/fencegate/fencegate/lockclient"
	"github.com/fencegate/fencegate/tokenclient"
)

// locks is a worker's lock service: lockclient over Redis (one server, or
// five masters for Redlock) with fencing tokens from the token service.
type locks struct {
	tokens *tokenclient.Client
	*lockclient.Client
}

func newLocks(cfg workerConfig) (*locks, error) {
	tc, err := tokenclient.NewClient(cfg.Tokens)
	if err != nil {
		return nil, err
	}
	lc, err := lockclient.Dial(cfg.Redis, tc, lockclient.WithTTL(cfg.TTL),
		lockclient.WithRetry(lockclient.FixedRetry(4*time.Millisecond)))
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
