package tokenapi_test

import (
	"encoding/json"
	"errors"
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
