package tokenclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/fencegate/fencegate/tokenapi"
)

// Members returns the committed member list from the leader, with whether
// each member has caught up.
func (c *Client) Members(ctx context.Context) (tokenapi.Members, error) {
	var ms tokenapi.Members
	err := c.do(ctx, http.MethodGet, "/v1/members", nil, &ms, "list members")
	return ms, err
}

// AddMember adds a member as a non-voter; the leader promotes it to voter
// once it has caught up (watch Members). The node must already run at
// apiAddr (started with an empty data directory and Config.Join): the
// leader refuses, with tokenapi.ErrRefused, a node that does not answer there, an
// id or an address that belongs to another member, and an id that is
// still a voter. Adding the same non-voter again does nothing.
func (c *Client) AddMember(ctx context.Context, id, raftAddr, apiAddr string) (tokenapi.Member, error) {
	body, _ := json.Marshal(tokenapi.Peer{ID: id, RaftAddr: raftAddr, APIAddr: apiAddr})
	var m tokenapi.Member
	err := c.do(ctx, http.MethodPost, "/v1/members", body, &m, "add member "+id)
	return m, err
}

// RemoveMember removes a member. The leader refuses, with tokenapi.ErrRefused, to
// remove a voter when fewer of the remaining voters answer than a quorum
// of them needs. Removing a node that is not a member succeeds.
func (c *Client) RemoveMember(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/members/"+url.PathEscape(id), nil, nil, "remove member "+id)
}

// Snapshot returns the cluster id and counter, read on the leader.
func (c *Client) Snapshot(ctx context.Context) (tokenapi.Snapshot, error) {
	var sn tokenapi.Snapshot
	err := c.do(ctx, http.MethodGet, "/v1/snapshot", nil, &sn, "take snapshot")
	return sn, err
}

// RaiseCounter raises the counter to at least v through a committed entry,
// never lowering it, and says what it did. It is what a restore does.
func (c *Client) RaiseCounter(ctx context.Context, v int64) (tokenapi.Restored, error) {
	body, _ := json.Marshal(tokenapi.RestoreRequest{AtLeast: v})
	var r tokenapi.Restored
	err := c.do(ctx, http.MethodPost, "/v1/restore", body, &r, "raise counter")
	return r, err
}
