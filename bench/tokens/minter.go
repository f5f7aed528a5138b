package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/fencegate/fencegate/tokenclient"
)

// fencegateMinter takes tokens with the token service's own Go client.
type fencegateMinter struct {
	c        *tokenclient.Client
	resource string
}

// newFencegateMinter returns a client of the cluster. With leaderFirst the
// leader's URL comes first in its list, so requests go to the leader as
// etcd's do; otherwise the list starts at n1 and a follower forwards.
func newFencegateMinter(ctx context.Context, cl *fencegateCluster, resource string, leaderFirst bool) (minter, error) {
	servers := slices.Clone(cl.urls)
	var opts []tokenclient.ClientOption
	if cl.tls != nil {
		opts = append(opts, tokenclient.WithTLS(cl.tls.fencegateClient()))
	}
	if leaderFirst {
		c, err := tokenclient.NewClient(servers, opts...)
		if err != nil {
			return nil, err
		}
		st, err := c.Status(ctx)
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("find fencegate leader: %w", err)
		}
		if i := slices.Index(servers, st.LeaderAPI); i > 0 {
			servers[0], servers[i] = servers[i], servers[0]
		} else if i < 0 {
			return nil, fmt.Errorf("find fencegate leader: status names %q, not one of %v", st.LeaderAPI, servers)
		}
	}
	c, err := tokenclient.NewClient(servers, opts...)
	if err != nil {
		return nil, err
	}
	return &fencegateMinter{c: c, resource: resource}, nil
}

// Next returns a fresh token for the resource.
func (m *fencegateMinter) Next(ctx context.Context) (int64, error) {
	return m.c.NextToken(ctx, m.resource)
}

// Close releases the client's connections.
func (m *fencegateMinter) Close() error { return m.c.Close() }
