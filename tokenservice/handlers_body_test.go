package tokenservice_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// A request body over the limit is refused as too large, naming the limit,
// not as JSON that is not the expected one; a body just under it still
// reads as JSON.
func TestBodyTooLargeNamesLimit(t *testing.T) {
	t.Parallel()
	c := tokenservicetest.StartCluster(t, 1)
	url := c.APIURL(0) + "/v1/tokens"
	post := func(body []byte) (int, string) {
		t.Helper()
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error, Code string }
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatalf("answer to a %d-byte body: %v", len(body), err)
		}
		return resp.StatusCode, e.Code + ": " + e.Error
	}
	big := []byte(`{"resource":"` + strings.Repeat("x", 10<<20) + `"}`)
	status, msg := post(big)
	if status != http.StatusBadRequest || !strings.Contains(msg, "larger than the limit of 65536 bytes") || strings.Contains(msg, "not the expected JSON") {
		t.Fatalf("10 MB body: %d %q; want 400 saying it is larger than the limit of 65536 bytes", status, msg)
	}
	if status, msg := post([]byte(`{"resource":"a"`)); status != http.StatusBadRequest || !strings.Contains(msg, "not the expected JSON") {
		t.Fatalf("truncated JSON: %d %q; want 400 not the expected JSON", status, msg)
	}
}
