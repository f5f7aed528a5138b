package tokenclient

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// FloorAnswer is the answer of GET /v1/floor: the counter as it was at
// least Age ago by the answering node's clock, from the newest checkpoint
// the cluster recorded that long ago. Every token handed out for a request
// that arrived after At is above Floor. Floor is 0 and At the zero time
// when the node holds no checkpoint that old.
type FloorAnswer struct {
	Floor  int64
	At     time.Time
	Age    time.Duration
	NodeID string
}

// Floor returns the counter as it was at least age ago (0 when the cluster
// holds no checkpoint that old): a fence with a token at or below it
// belongs to a holder that asked for its token more than age ago, as the
// answering node's clock tells. Any node answers, from its applied state;
// a node that lags answers a lower floor.
func (c *Client) Floor(ctx context.Context, age time.Duration) (int64, error) {
	a, err := c.FloorAt(ctx, age)
	return a.Floor, err
}

// FloorAt is Floor with the time of the checkpoint the floor comes from
// and the node that answered.
func (c *Client) FloorAt(ctx context.Context, age time.Duration) (FloorAnswer, error) {
	if age < 0 {
		return FloorAnswer{}, fmt.Errorf("%w: floor age %v is negative; give 0 or more", tokenapi.ErrBadRequest, age)
	}
	var resp tokenapi.FloorResponse
	what := fmt.Sprintf("read the floor %v ago", age)
	if err := c.do(ctx, http.MethodGet, "/v1/floor?age="+url.QueryEscape(age.String()), nil, &resp, what); err != nil {
		return FloorAnswer{}, err
	}
	a := FloorAnswer{Floor: resp.Floor, Age: age, NodeID: resp.NodeID}
	if resp.At != "" {
		at, err := time.Parse(time.RFC3339Nano, resp.At)
		if err != nil {
			return FloorAnswer{}, fmt.Errorf("tokenservice: %s: %w: node %s answered a checkpoint time %q that is not RFC 3339", what, tokenapi.ErrInternal, resp.NodeID, resp.At)
		}
		a.At = at
	}
	if a.Floor < 0 {
		return FloorAnswer{}, fmt.Errorf("tokenservice: %s: %w: node %s answered a negative floor %d", what, tokenapi.ErrInternal, resp.NodeID, a.Floor)
	}
	return a, nil
}
