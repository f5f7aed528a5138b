package tokenservice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/fencegate/fencegate/raftstore"
)

// leaderAPI returns the API URL of the leader this node knows, or an error
// that says why it cannot forward.
func (s *Server) leaderAPI() (string, error) {
	id, api := s.Store().Leader()
	switch {
	case id == "":
		return "", fmt.Errorf("%w: node %s knows no leader", ErrNoQuorum, s.cfg.ID)
	case id == s.cfg.ID:
		return "", fmt.Errorf("%w: node %s is between terms", ErrNoQuorum, s.cfg.ID)
	case api == "":
		return "", fmt.Errorf("%w: the API address of leader %s is not known yet", ErrUnavailable, id)
	}
	return api, nil
}

// forwardAlloc asks the leader to allocate n tokens in one entry.
func (s *Server) forwardAlloc(ctx context.Context, n, hops int) (raftstore.Range, error) {
	body, _ := json.Marshal(allocRequest{Count: n})
	s.metrics.forwarded(n)
	status, out, err := s.forwardRaw(ctx, http.MethodPost, "/v1/internal/allocate", body, hops)
	if err != nil {
		return raftstore.Range{}, err
	}
	if status != http.StatusOK {
		return raftstore.Range{}, decodeError(status, out)
	}
	var resp allocResponse
	if err := json.Unmarshal(out, &resp); err != nil || resp.Count != n || resp.First <= 0 {
		return raftstore.Range{}, fmt.Errorf("%w: leader answered an allocation of %d tokens with %q", ErrInternal, n, out)
	}
	return raftstore.Range{First: resp.First, Count: resp.Count, Term: resp.Term, Index: resp.Index, Leader: resp.Leader}, nil
}

// forwardRaw sends a request to the leader and returns its status and body.
func (s *Server) forwardRaw(ctx context.Context, method, path string, body []byte, hops int) (int, []byte, error) {
	api, err := s.leaderAPI()
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ForwardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, api+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: build forward request: %v", ErrInternal, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(hopsHeader, strconv.Itoa(hops))
	resp, err := s.fwd.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: forward to leader at %s: %w", ErrUnavailable, api, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return 0, nil, fmt.Errorf("%w: read leader's answer from %s: %w", ErrUnavailable, api, err)
	}
	return resp.StatusCode, out, nil
}

// decodeError turns an error response into an *APIError.
func decodeError(status int, body []byte) error {
	var e errorResponse
	if err := json.Unmarshal(body, &e); err != nil || e.Code == "" {
		code := CodeInternal
		if status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
			code = CodeUnavailable
		}
		return &APIError{Status: status, Code: code, Message: fmt.Sprintf("%v: HTTP %d: %.200s", codeSentinel(code), status, body)}
	}
	return &APIError{Status: status, Code: e.Code, Message: e.Error, LeaderAPI: e.LeaderAPI}
}
