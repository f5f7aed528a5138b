package tokenservice_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// asked is a token and when its request was sent.
type asked struct {
	sent  time.Time
	token int64
}

// floorSeen is a floor a node answered.
type floorSeen struct {
	node      int
	age       time.Duration
	floor     int64
	at, asked time.Time
}

// The floor for an age is never above a token asked for after the
// checkpoint it comes from, on any node, with reserved ranges handed out
// from the leader's memory, a leader change, snapshots and a restarted
// node; the floor keeps up with the counter under one leader; and every
// node answers the same once they applied the same log.
//
// Not parallel: it sets the process's checkpoint interval, and it asks the
// floor to follow the counter within a second, which a machine busy with
// the package's parallel clusters can miss.
func TestFloorNeverAboveLaterTokens(t *testing.T) {
	defer raftstore.SetCheckpointIntervalForTest(100 * time.Millisecond)()
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithSnapshotThreshold(64, 16),
		tokenservicetest.WithConfig(func(_ int, cfg *tokenservice.Config) { cfg.ReserveSize = 200 }))
	var mu sync.Mutex
	var tokens []asked
	var floors []floorSeen
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := c.Client(t)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				sent := time.Now()
				tok, err := cl.NextToken(ctx, "orders/"+string(rune('a'+w)))
				cancel()
				if err == nil {
					mu.Lock()
					tokens = append(tokens, asked{sent, tok})
					mu.Unlock()
				}
				if w == 0 {
					time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // some idle spells
				}
			}
		}()
	}
	// One reader per node, not following the leader: followers answer
	// from what they applied.
	for i := range c.Len() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := c.ClientFor(t, []string{c.APIURL(i)}, tokenclient.WithFollowLeader(false), tokenclient.WithMaxWait(time.Second))
			for {
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Millisecond):
				}
				age := time.Duration(rand.IntN(4)) * 150 * time.Millisecond
				now := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				a, err := cl.FloorAt(ctx, age)
				cancel()
				if err != nil {
					continue // a stopped node
				}
				if !a.At.IsZero() && time.Since(a.At) < age {
					t.Errorf("node %d answered for age %v a checkpoint only %v old", i, age, time.Since(a.At))
				}
				mu.Lock()
				floors = append(floors, floorSeen{i, age, a.Floor, a.At, now})
				mu.Unlock()
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	old := c.Leader(t)
	if err := c.Stop(old); err != nil { // hands leadership over
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	c.Restart(old)
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(tokens, func(a, b asked) int { return a.sent.Compare(b.sent) })
	if len(tokens) < 100 || len(floors) < 50 {
		t.Fatalf("%d tokens and %d floors: too few to tell", len(tokens), len(floors))
	}
	// suffix minimum of the tokens by the time they were asked for
	suf := make([]int64, len(tokens)+1)
	suf[len(tokens)] = 1<<63 - 1
	for i := len(tokens) - 1; i >= 0; i-- {
		suf[i] = min(suf[i+1], tokens[i].token)
	}
	nonzero := 0
	for _, f := range floors {
		if f.at.IsZero() {
			continue
		}
		nonzero++
		i, _ := slices.BinarySearchFunc(tokens, f.at, func(a asked, at time.Time) int {
			if a.sent.After(at) {
				return 1
			}
			return -1
		})
		if suf[i] <= f.floor {
			t.Fatalf("node %d answered floor %d (checkpoint at %s, age %v), but token %d was asked for after that checkpoint",
				f.node, f.floor, f.at.Format(time.RFC3339Nano), f.age, suf[i])
		}
	}
	// The floor follows the counter: the last floor of age 0 is above
	// every token asked for a second before it was read.
	var last floorSeen
	for _, f := range floors {
		if f.age == 0 && f.asked.After(last.asked) {
			last = f
		}
	}
	i, _ := slices.BinarySearchFunc(tokens, last.asked.Add(-time.Second), func(a asked, at time.Time) int { return a.sent.Compare(at) })
	if i == 0 || last.floor < tokens[i-1].token {
		t.Fatalf("the floor read last (%d, at %v) is below token %d, asked for more than a second before: the floor does not follow the counter",
			last.floor, last.at, tokens[max(i-1, 0)].token)
	}
	t.Logf("%d tokens, %d floors (%d from a checkpoint); last floor %d, counter %d", len(tokens), len(floors), nonzero, last.floor, maxStatusToken(c))

	// Every node, the restarted one included, answers the same.
	testutil.Eventually(t, 10*time.Second, "every node to apply the same log", func() bool {
		a := c.Node(0).LocalStatus().AppliedIndex
		return a == c.Node(1).LocalStatus().AppliedIndex && a == c.Node(2).LocalStatus().AppliedIndex
	})
	for _, age := range []time.Duration{0, 700 * time.Millisecond, 2 * time.Second, 3 * time.Second} {
		var answers []tokenclient.FloorAnswer
		for try := 0; ; try++ {
			answers = answers[:0]
			for i := range c.Len() {
				cl := c.ClientFor(t, []string{c.APIURL(i)}, tokenclient.WithFollowLeader(false))
				a, err := cl.FloorAt(context.Background(), age)
				if err != nil {
					t.Fatal(err)
				}
				answers = append(answers, a)
			}
			same := answers[0].Floor == answers[1].Floor && answers[0].Floor == answers[2].Floor &&
				answers[0].At.Equal(answers[1].At) && answers[0].At.Equal(answers[2].At)
			if same {
				break
			}
			if try == 3 { // a checkpoint may fall between the three reads, not four times
				t.Fatalf("for age %v the nodes answer %+v", age, answers)
			}
		}
	}
}

// GET /v1/floor answers clients and admins, refuses a peer certificate and
// a caller without identity, and answers a bad age with a 400 of one line.
func TestFloorRoute(t *testing.T) {
	ca := newCA(t, "cluster")
	creds, bearer := credentials(t, map[string][]tokenapi.Role{"app": {tokenapi.RoleClient}, "ops": {tokenapi.RoleAdmin}})
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, creds))
	anon := tokenclient.ClientTLSConfig(ca.Pool())
	cl := c.Client(t, tokenclient.WithTLS(issueTLS(t, ca, ca, "app", pki.Options{}, tokenapi.RoleClient)))
	tokenservicetest.Mint(t, cl, 3)
	follower := (c.Leader(t) + 1) % c.Len()
	url := c.APIURL(follower) + "/v1/floor?age="
	get := func(cfg *tlsConfigAuth, age string) (int, map[string]any, string) {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg.tls}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequest("GET", url+age, nil)
		if cfg.auth != "" {
			req.Header.Set("Authorization", cfg.auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		return resp.StatusCode, m, string(body)
	}
	clientCert := &tlsConfigAuth{tls: issueTLS(t, ca, ca, "app", pki.Options{}, tokenapi.RoleClient)}
	testutil.Eventually(t, 10*time.Second, "the follower to apply the first checkpoint", func() bool {
		_, m, _ := get(clientCert, "0s")
		return m["at"] != nil
	})
	for _, who := range []struct {
		name string
		cfg  *tlsConfigAuth
		want int
	}{
		{"client cert", clientCert, http.StatusOK},
		{"admin cert", &tlsConfigAuth{tls: issueTLS(t, ca, ca, "ops", pki.Options{}, tokenapi.RoleAdmin)}, http.StatusOK},
		{"bearer client", &tlsConfigAuth{tls: anon, auth: "Bearer app:" + bearer["app"].Secret}, http.StatusOK},
		{"bearer admin", &tlsConfigAuth{tls: anon, auth: "Bearer ops:" + bearer["ops"].Secret}, http.StatusOK},
		{"peer cert of a member", &tlsConfigAuth{tls: issueTLS(t, ca, ca, c.ID(c.Leader(t)), pki.Options{}, tokenapi.RolePeer)}, http.StatusForbidden},
		{"nothing", &tlsConfigAuth{tls: anon}, http.StatusUnauthorized},
	} {
		code, m, body := get(who.cfg, "0s")
		if code != who.want {
			t.Errorf("%s: %d %s; want %d", who.name, code, body, who.want)
			continue
		}
		if code != http.StatusOK {
			continue
		}
		// One checkpoint at least: the first token moved the counter.
		if _, isNum := m["floor"].(float64); !isNum || m["at"] == nil || m["age"] != "0s" || m["node_id"] != c.ID(follower) {
			t.Errorf("%s: answer %s", who.name, body)
		}
		if _, err := time.Parse(time.RFC3339Nano, m["at"].(string)); err != nil {
			t.Errorf("%s: at %q is not RFC 3339", who.name, m["at"])
		}
	}
	code, m, body := get(clientCert, "30d")
	if code != http.StatusOK || m["floor"] != float64(0) || m["at"] != nil || m["age"] != "720h0m0s" {
		t.Errorf("age 30d on a new cluster: %d %s; want floor 0 and no checkpoint", code, body)
	}
	for _, age := range []string{"", "-5m", "5x", "soon", "-1d", "99999999999999d"} {
		code, m, body := get(clientCert, age)
		msg, _ := m["error"].(string)
		if code != http.StatusBadRequest || m["code"] != tokenapi.CodeBadRequest || msg == "" || strings.Contains(msg, "\n") {
			t.Errorf("age %q: %d %s; want 400 bad_request with a one-line message", age, code, body)
		}
	}
	if _, err := cl.Floor(context.Background(), -time.Second); !errors.Is(err, tokenapi.ErrBadRequest) {
		t.Errorf("Floor(-1s) = %v, want tokenapi.ErrBadRequest", err)
	}
	if f, err := cl.Floor(context.Background(), 0); err != nil || f < 0 || f > 3 {
		t.Errorf("Floor(0) = %d, %v; want the counter before the last checkpoint, 0..3", f, err)
	}
}

// tlsConfigAuth is a caller: its TLS configuration and Authorization.
type tlsConfigAuth struct {
	tls  *tls.Config
	auth string
}
