package tokenservice

import (
	"encoding/json"
	"testing"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
)

// TestStatusAndMembersJSON pins the JSON of GET /v1/status, GET
// /v1/members, POST /v1/members and GET /v1/internal/configuration: field
// names, order and which fields are left out when empty.
func TestStatusAndMembersJSON(t *testing.T) {
	t.Parallel()
	yes := true
	st := statusFrom(raftstore.Status{StatusFields: tokenapi.StatusFields{
		ID: "n1", ClusterID: "c1", State: "Leader", Term: 3, LastIndex: 10, CommitIndex: 9, AppliedIndex: 8,
		LeaderID: "n1", LeaderAPI: "http://h1:7101", LastToken: 42,
		Members: []tokenapi.Member{
			{ID: "n1", RaftAddr: "h1:7201", APIAddr: "http://h1:7101", Suffrage: "Voter", Leader: true},
			{ID: "n2", RaftAddr: "h2:7201", APIAddr: "http://h2:7101", Suffrage: "Nonvoter"},
		},
	}, FirstLogIndex: 1, LastSnapshotIndex: 5})
	st.ReadIndex = &tokenapi.ReadIndexStatus{Range: &tokenapi.ReservedRange{Next: 43, Last: 99, Term: 3, Index: 7},
		RoundsPerSecond: 1.5, Rounds: 4, RoundFailures: 1, Reservations: 2}
	empty := statusFrom(raftstore.Status{StatusFields: tokenapi.StatusFields{ID: "n3", State: "Follower"}})
	members := tokenapi.Members{ClusterID: "c1", LeaderID: "n1", CommitIndex: 9, Members: []tokenapi.Member{
		{ID: "n1", RaftAddr: "h1:7201", APIAddr: "http://h1:7101", Suffrage: "Voter", Leader: true, CaughtUp: &yes, AppliedIndex: 9},
		{ID: "n2", RaftAddr: "h2:7201", APIAddr: "http://h2:7101", Suffrage: "Nonvoter", Problem: "does not answer"},
	}}
	conf := raftstore.Configuration{ClusterID: "c1", LeaderID: "n1", Members: []tokenapi.Member{
		{ID: "n1", RaftAddr: "h1:7201", APIAddr: "http://h1:7101", Suffrage: "Voter", Leader: true},
	}}
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"status", st, `{"id":"n1","cluster_id":"c1","leader_id":"n1","leader_api":"http://h1:7101","state":"Leader",` +
			`"term":3,"last_index":10,"commit_index":9,"applied_index":8,"last_token":42,"members":[` +
			`{"id":"n1","raft_addr":"h1:7201","api_addr":"http://h1:7101","suffrage":"Voter","leader":true},` +
			`{"id":"n2","raft_addr":"h2:7201","api_addr":"http://h2:7101","suffrage":"Nonvoter","leader":false}],` +
			`"read_index":{"range":{"next":43,"last":99,"term":3,"index":7},"rounds_per_second":1.5,"rounds":4,` +
			`"round_failures":1,"reservations":2}}`},
		{"status without members", empty, `{"id":"n3","leader_id":"","leader_api":"","state":"Follower","term":0,` +
			`"last_index":0,"commit_index":0,"applied_index":0,"last_token":0,"members":[]}`},
		{"members", members, `{"cluster_id":"c1","leader_id":"n1","commit_index":9,"members":[` +
			`{"id":"n1","raft_addr":"h1:7201","api_addr":"http://h1:7101","suffrage":"Voter","leader":true,"caught_up":true,"applied_index":9},` +
			`{"id":"n2","raft_addr":"h2:7201","api_addr":"http://h2:7101","suffrage":"Nonvoter","leader":false,"problem":"does not answer"}]}`},
		{"new member", tokenapi.Peer{ID: "n4", RaftAddr: "h4:7201", APIAddr: "http://h4:7101"},
			`{"id":"n4","raft_addr":"h4:7201","api_addr":"http://h4:7101"}`},
		{"configuration", conf, `{"cluster_id":"c1","leader_id":"n1","members":[` +
			`{"id":"n1","raft_addr":"h1:7201","api_addr":"http://h1:7101","suffrage":"Voter","leader":true}]}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(b) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, b, c.want)
		}
	}
}
