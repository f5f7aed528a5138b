package tokenservice_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// batchAnswer is the answer of POST /v1/tokens as a test reads it.
type batchAnswer struct {
	Tokens []struct {
		Resource string `json:"resource"`
		Token    int64  `json:"token"`
	} `json:"tokens"`
	Term   uint64 `json:"term"`
	Index  uint64 `json:"index"`
	Leader string `json:"leader"`
	Error  string `json:"error"`
	Code   string `json:"code"`
}

func postTokens(t *testing.T, url, body string) (int, batchAnswer) {
	t.Helper()
	resp, err := http.Post(url+"/v1/tokens", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a batchAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatalf("POST %.80s: decode answer: %v", body, err)
	}
	return resp.StatusCode, a
}

// The batch form over raw HTTP, on every node: bad batches are refused as a
// whole with 400 and mint nothing; good ones get consecutive tokens in
// request order, above every earlier token.
func TestHTTPBatchForm(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 3)
	c.Leader(t)
	tooMany := `{"resources":["a"` + strings.Repeat(`,"a"`, tokenservice.MaxBatchResources) + `]}`
	for i, u := range c.APIURLs() {
		for _, body := range []string{`{"resources":["a",""]}`, `{"resources":["  ","b"]}`, `{"resources":[]}`,
			`{"resource":"a","resources":["b"]}`, tooMany} {
			status, a := postTokens(t, u, body)
			if status != http.StatusBadRequest || a.Code != "bad_request" || a.Error == "" {
				t.Errorf("node %d: POST %.80s = %d %+v; want 400 bad_request", i, body, status, a)
			}
		}
	}
	status, a := postTokens(t, c.APIURL(0), tooMany)
	if status != http.StatusBadRequest || !strings.Contains(a.Error, fmt.Sprint(tokenservice.MaxBatchResources)) {
		t.Errorf("too many resources: %d %q; want 400 naming the limit %d", status, a.Error, tokenservice.MaxBatchResources)
	}
	if got := maxStatusToken(c); got != 0 {
		t.Fatalf("bad batches minted tokens: last token %d", got)
	}
	var last int64
	for round := range 2 {
		for i, u := range c.APIURLs() {
			status, a := postTokens(t, u, `{"resources":["x","y","x"]}`)
			if status != http.StatusOK || len(a.Tokens) != 3 || a.Term == 0 || a.Index == 0 || a.Leader == "" {
				t.Fatalf("round %d node %d: %d %+v; want 200 with 3 tokens", round, i, status, a)
			}
			for k, want := range []string{"x", "y", "x"} {
				tk := a.Tokens[k]
				if tk.Resource != want || tk.Token <= last || (k > 0 && tk.Token != a.Tokens[k-1].Token+1) {
					t.Fatalf("round %d node %d: tokens %+v (previous %d); want %v consecutive above it", round, i, a.Tokens, last, []string{"x", "y", "x"})
				}
				last = tk.Token
			}
		}
	}
	// The single form is unchanged.
	resp, err := http.Post(c.APIURL(1)+"/v1/tokens", "application/json", strings.NewReader(`{"resource":"orders/42"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var one map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&one); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("single form: %d %v", resp.StatusCode, err)
	}
	for _, k := range []string{"resource", "token", "term", "index", "leader"} {
		if _, ok := one[k]; !ok || len(one) != 5 {
			t.Fatalf("single form answer %v; want exactly resource, token, term, index, leader", one)
		}
	}
	if one["resource"] != "orders/42" || int64(one["token"].(float64)) <= last {
		t.Fatalf("single form answer %v; want orders/42 above %d", one, last)
	}
}
