package tokenservice_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// Must show, over mutual TLS: a node whose data directory was lost and
// that is restarted with its usual flags refuses to found (its peers,
// asked over mutual TLS, hold the cluster's state), and comes back only
// through the replacement procedure, whose membership changes need the
// admin role: a caller without an identity gets 401, a client, a bearer
// client and the new node's own peer certificate get 403, and the
// configuration does not change. An admin's add is checked against the
// new node over its Raft layer too: the Raft address of another member is
// refused as that member's. After the replacement every token is above
// every token handed out before the wipe, also through the replaced node.
func TestReplaceOverMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "cluster")
	creds, bearer := credentials(t, map[string][]tokenapi.Role{
		"app": {tokenapi.RoleClient}, "ops": {tokenapi.RoleAdmin},
	})
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, creds))
	app := tokenservicetest.ClientTLS(t, ca, "app", tokenapi.RoleClient)
	before := tokenservicetest.Mint(t, c.Client(t, app...), 20)
	highest := before[len(before)-1]

	leader := c.Leader(t)
	victim, other := (leader+1)%3, (leader+2)%3
	others := []string{c.APIURL(leader), c.APIURL(other)}
	c.Wipe(t, victim)
	err := c.StartErr(victim)
	if !errors.Is(err, raftstore.ErrMustReplace) || !strings.Contains(err.Error(), "replace it through membership") {
		t.Fatalf("wiped %s restarted with its usual flags: Start = %v; want ErrMustReplace", c.ID(victim), err)
	}
	t.Logf("wiped %s refuses to found: %v", c.ID(victim), err)

	admin := c.ClientFor(t, others, c.AdminOptions()...)
	members := func() string { return memberLine(t, admin) }
	// Callers that may not change membership, each with the error it must get.
	anon := []tokenclient.ClientOption{tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool()))}
	refusedCallers := []struct {
		name string
		opts []tokenclient.ClientOption
		want error
	}{
		{"no identity", anon, tokenapi.ErrUnauthenticated},
		{"client certificate", app, tokenapi.ErrForbidden},
		{"bearer client", append(anon[:1:1], tokenclient.WithCredential(bearer["app"])), tokenapi.ErrForbidden},
		{"the node's own peer certificate", tokenservicetest.ClientTLS(t, ca, c.ID(victim), tokenapi.RolePeer), tokenapi.ErrForbidden},
	}
	refused := func(what string, call func(cl *tokenclient.Client) error) {
		t.Helper()
		want := members()
		for _, rc := range refusedCallers {
			cl := c.ClientFor(t, others, append(rc.opts, tokenclient.WithMaxWait(5*time.Second))...)
			if err := call(cl); !errors.Is(err, rc.want) || !strings.Contains(err.Error(), "admin") {
				t.Errorf("%s as %s: %v; want %v naming the admin role", what, rc.name, err, rc.want)
			}
		}
		if got := members(); got != want {
			t.Fatalf("%s by callers without the admin role changed the members:\n before %s\n after  %s", what, want, got)
		}
	}

	// 1. Remove the lost member: admin only.
	refused("members remove", func(cl *tokenclient.Client) error {
		return cl.RemoveMember(context.Background(), c.ID(victim))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := admin.RemoveMember(ctx, c.ID(victim)); err != nil {
		t.Fatalf("admin removes %s: %v", c.ID(victim), err)
	}

	// 2. Start it empty, to join.
	c.StartJoin(t, victim)
	raftAddr, apiAddr := c.Node(victim).RaftAddr(), c.APIURL(victim)

	// 3. Add it: admin only, and only at its own addresses.
	refused("members add", func(cl *tokenclient.Client) error {
		_, err := cl.AddMember(context.Background(), c.ID(victim), raftAddr, apiAddr)
		return err
	})
	want := members()
	_, err = admin.AddMember(ctx, c.ID(victim), c.Node(other).RaftAddr(), apiAddr)
	if !errors.Is(err, tokenapi.ErrRefused) || !strings.Contains(err.Error(), `is "`+c.ID(other)+`"`) {
		t.Fatalf("add %s at %s's raft address: %v; want tokenapi.ErrRefused naming %s", c.ID(victim), c.ID(other), err, c.ID(other))
	}
	if got := members(); got != want {
		t.Fatalf("a refused add changed the members:\n before %s\n after  %s", want, got)
	}
	c.AddMember(t, victim)
	if l := members(); !strings.Contains(l, c.ID(victim)+":Voter@"+raftAddr+","+apiAddr) {
		t.Fatalf("members after the replacement: %s; want %s a voter at %s, %s", l, c.ID(victim), raftAddr, apiAddr)
	}

	t.Logf("members after the replacement: %s", members())
	// Tokens continue above everything before, also through the replaced
	// node, which forwards to the leader over mutual TLS.
	after := tokenservicetest.Mint(t, c.Client(t, app...), 5)
	if after[0] <= highest {
		t.Fatalf("first token after the replacement %d <= %d handed out before the wipe", after[0], highest)
	}
	tok := tokenservicetest.Mint(t, c.ClientFor(t, []string{apiAddr}, append(app, tokenclient.WithFollowLeader(false))...), 1)[0]
	if tok <= after[len(after)-1] {
		t.Fatalf("token through the replaced %s %d <= %d", c.ID(victim), tok, after[len(after)-1])
	}
}
