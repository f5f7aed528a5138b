package tokenapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
)

// Every code unwraps to its sentinel, and only the codes a retry can
// change are retryable.
func TestAPIErrorCodes(t *testing.T) {
	for _, c := range []struct {
		code      string
		sentinel  error
		retryable bool
	}{
		{tokenapi.CodeBadRequest, tokenapi.ErrBadRequest, false},
		{tokenapi.CodeNotLeader, tokenapi.ErrNotLeader, true},
		{tokenapi.CodeNoQuorum, tokenapi.ErrNoQuorum, true},
		{tokenapi.CodeUnavailable, tokenapi.ErrUnavailable, true},
		{tokenapi.CodeRefused, tokenapi.ErrRefused, false},
		{tokenapi.CodeInternal, tokenapi.ErrInternal, true},
		{tokenapi.CodeExhausted, tokenapi.ErrExhausted, false},
		{tokenapi.CodeUnauthenticated, tokenapi.ErrUnauthenticated, false},
		{tokenapi.CodeForbidden, tokenapi.ErrForbidden, false},
		{"no_such_code", tokenapi.ErrInternal, true},
	} {
		var err error = &tokenapi.APIError{Status: 500, Code: c.code, Message: "m"}
		if !errors.Is(err, c.sentinel) {
			t.Errorf("code %q: %v does not match %v", c.code, err, c.sentinel)
		}
		var ae *tokenapi.APIError
		if !errors.As(err, &ae) || ae.Retryable() != c.retryable {
			t.Errorf("code %q: Retryable() = %v, want %v", c.code, ae.Retryable(), c.retryable)
		}
	}
	if !errors.Is(tokenapi.ErrEmptyResource, tokenapi.ErrBadRequest) || !errors.Is(tokenapi.ErrBadResource, tokenapi.ErrBadRequest) {
		t.Error("the resource-name errors must be ErrBadRequest")
	}
}

// The status answer keeps its JSON field names, StatusFields inline.
func TestStatusJSON(t *testing.T) {
	b, err := json.Marshal(tokenapi.Status{StatusFields: tokenapi.StatusFields{ID: "n1", Members: []tokenapi.Member{{ID: "n1", Suffrage: "Voter"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "leader_id", "leader_api", "state", "term", "last_index", "commit_index", "applied_index", "last_token", "members"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status JSON %s lacks %q", b, k)
		}
	}
	if _, ok := m["read_index"]; ok {
		t.Errorf("status JSON %s has read_index without one", b)
	}
}

// DecodeError keeps what an error answer says, and classifies an answer
// that is not the API's error form by its status alone.
func TestDecodeError(t *testing.T) {
	body := []byte(`{"error":"node n2 is not the leader","code":"not_leader","leader_api":"http://h1:7101","leader_id":"n1"}`)
	var ae *tokenapi.APIError
	if err := tokenapi.DecodeError(503, body); !errors.As(err, &ae) || !errors.Is(err, tokenapi.ErrNotLeader) ||
		ae.Status != 503 || ae.Message != "node n2 is not the leader" || ae.LeaderAPI != "http://h1:7101" || ae.LeaderID != "n1" {
		t.Errorf("error answer decoded as %#v", err)
	}
	for _, c := range []struct {
		status int
		want   error
	}{
		{502, tokenapi.ErrUnavailable},
		{503, tokenapi.ErrUnavailable},
		{504, tokenapi.ErrUnavailable},
		{500, tokenapi.ErrInternal},
		{404, tokenapi.ErrInternal},
	} {
		err := tokenapi.DecodeError(c.status, []byte("<html>bad gateway</html>"))
		if !errors.As(err, &ae) || !errors.Is(err, c.want) || ae.Status != c.status || ae.LeaderAPI != "" {
			t.Errorf("status %d with a page: %#v, want %v", c.status, err, c.want)
		}
		if want := fmt.Sprintf("%v: HTTP %d: <html>bad gateway</html>", c.want, c.status); err.Error() != want {
			t.Errorf("status %d: message %q, want %q", c.status, err.Error(), want)
		}
	}
	// A JSON answer without a code is not the API's error form either.
	if err := tokenapi.DecodeError(500, []byte(`{"error":"x"}`)); !errors.Is(err, tokenapi.ErrInternal) {
		t.Errorf("JSON without a code: %v", err)
	}
}
