package tokenservice

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
)

// maxBody caps request bodies.
const maxBody = 64 << 10

// MaxBatchResources caps how many resources one batch-form token request
// ({"resources":[...]}) may name.
const MaxBatchResources = 4096

// running answers 503 while the node has not started Raft (it is still
// deciding whether it may found or join), and calls h once it runs.
func (s *Server) running(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.Store() == nil {
			s.writeError(w, fmt.Errorf("%w: node %s has not started Raft yet: %s", tokenapi.ErrUnavailable, s.cfg.ID, s.startingReason()))
			return
		}
		h(w, r)
	}
}

// startingReason says what a node that has not started Raft waits for.
func (s *Server) startingReason() string {
	p := s.pending.Load()
	if p == nil {
		return "it is starting"
	}
	st := p.State()
	why := p.Waiting()
	if why == "" {
		why = "deciding"
	}
	return st.Phase + ": " + why
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": s.cfg.ID})
}

func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	var req tokenapi.TokenRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, err)
		return
	}
	if req.Resources != nil {
		s.handleTokenBatch(w, r, req)
		return
	}
	if err := tokenapi.ValidateResource(req.Resource); err != nil {
		s.writeError(w, err)
		return
	}
	rng, err := s.next(r.Context(), 1)
	if err != nil {
		s.writeError(w, err)
		return
	}
	proof, err := s.proofFor(req.Resource, rng.First)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.setLeaderHeaders(w)
	s.metrics.served(1)
	bp := encodeBufs.Get().(*[]byte)
	writeAnswer(w, bp, appendTokenResponse((*bp)[:0], &tokenapi.TokenResponse{Resource: req.Resource, Token: rng.First, Proof: proof, Term: rng.Term, Index: rng.Index, Leader: rng.Leader}))
}

// setLeaderHeaders names the leader on a successful token answer: its API
// URL, so that clients skip the forwarding hop next time, and its ID, which
// a client over TLS requires of the node answering at that URL.
func (s *Server) setLeaderHeaders(w http.ResponseWriter) {
	if id, api := s.leader(); api != "" {
		w.Header().Set(tokenapi.LeaderHeader, api)
		w.Header().Set(tokenapi.LeaderIDHeader, id)
	}
}

// handleTokenBatch serves the batch form {"resources":[...]}: one allocation
// of len(resources) consecutive tokens, handed out in request order.
func (s *Server) handleTokenBatch(w http.ResponseWriter, r *http.Request, req tokenapi.TokenRequest) {
	switch {
	case req.Resource != "":
		s.writeError(w, fmt.Errorf("%w: give either \"resource\" or \"resources\", not both", tokenapi.ErrBadRequest))
		return
	case len(req.Resources) == 0:
		s.writeError(w, fmt.Errorf("%w: \"resources\" is empty; name at least one resource", tokenapi.ErrBadRequest))
		return
	case len(req.Resources) > MaxBatchResources:
		s.writeError(w, fmt.Errorf("%w: \"resources\" names %d resources; at most %d per request", tokenapi.ErrBadRequest, len(req.Resources), MaxBatchResources))
		return
	}
	for i, res := range req.Resources {
		if err := tokenapi.ValidateResource(res); err != nil {
			s.writeError(w, fmt.Errorf("resources[%d]: %w", i, err))
			return
		}
	}
	rng, err := s.next(r.Context(), len(req.Resources))
	if err != nil {
		s.writeError(w, err)
		return
	}
	if rng.Count < len(req.Resources) {
		s.writeError(w, fmt.Errorf("allocated %d tokens for %d resources", rng.Count, len(req.Resources)))
		return
	}
	proofs, err := s.proofsFor(req.Resources, rng.First)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.setLeaderHeaders(w)
	s.metrics.served(len(req.Resources))
	out := tokenapi.BatchResponse{Tokens: make([]tokenapi.BatchToken, len(req.Resources)), Term: rng.Term, Index: rng.Index, Leader: rng.Leader}
	for i, res := range req.Resources {
		out.Tokens[i] = tokenapi.BatchToken{Resource: res, Token: rng.First + int64(i)}
		if proofs != nil {
			out.Tokens[i].Proof = proofs[i]
		}
	}
	bp := encodeBufs.Get().(*[]byte)
	writeAnswer(w, bp, appendBatchResponse((*bp)[:0], &out))
}

// handleAllocate serves a batch forwarded by another node.
func (s *Server) handleAllocate(w http.ResponseWriter, r *http.Request) {
	var req tokenapi.AllocRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, err)
		return
	}
	if req.Count < 1 || req.Count > maxAllocCount {
		s.writeError(w, fmt.Errorf("%w: count %d out of range 1..%d", tokenapi.ErrBadRequest, req.Count, maxAllocCount))
		return
	}
	hops := hopsOf(r)
	var rng raftstore.Range
	err := raftstore.ErrNotLeader
	if s.Store().IsLeader() {
		rng, err = s.leaderBatch.Next(r.Context(), req.Count)
	}
	if errors.Is(err, raftstore.ErrNotLeader) {
		if hops < maxHops {
			rng, err = s.forwardAlloc(r.Context(), req.Count, hops+1)
		} else {
			err = fmt.Errorf("%w: request already forwarded %d times", tokenapi.ErrNotLeader, hops)
		}
	}
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tokenapi.AllocResponse{First: rng.First, Count: rng.Count, Term: rng.Term, Index: rng.Index, Leader: rng.Leader})
}

func (s *Server) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.LocalStatus())
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.Store() == nil {
		s.writeError(w, fmt.Errorf("%w: node %s has not started Raft yet: %s", tokenapi.ErrUnavailable, s.cfg.ID, s.startingReason()))
		return
	}
	if !s.Store().Ready() {
		s.writeError(w, fmt.Errorf("%w: node %s knows no leader or has not applied all committed entries yet", tokenapi.ErrUnavailable, s.cfg.ID))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "id": s.cfg.ID})
}

func decodeBody(r *http.Request, v any) error {
	// MaxBytesReader, not LimitReader: a body cut at the limit must read as
	// too large, not as JSON that ends early.
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBody))
	if err := dec.Decode(v); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return fmt.Errorf("%w: body is larger than the limit of %d bytes (%d KiB); a request is small JSON such as {\"resource\":\"orders/42\"}", tokenapi.ErrBadRequest, maxBody, maxBody>>10)
		}
		return fmt.Errorf("%w: body is not the expected JSON (e.g. {\"resource\":\"orders/42\"}): %v", tokenapi.ErrBadRequest, err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// classify maps an error to its API code and a message that says what to do.
func (s *Server) classify(err error) *tokenapi.APIError {
	var ae *tokenapi.APIError
	if errors.As(err, &ae) {
		return ae
	}
	code := tokenapi.CodeInternal
	switch {
	case errors.Is(err, tokenapi.ErrBadRequest), errors.Is(err, raftstore.ErrBadConfig):
		code = tokenapi.CodeBadRequest
	case errors.Is(err, tokenapi.ErrUnauthenticated):
		code = tokenapi.CodeUnauthenticated
	case errors.Is(err, tokenapi.ErrForbidden):
		code = tokenapi.CodeForbidden
	case errors.Is(err, tokenapi.ErrRefused), errors.Is(err, raftstore.ErrConflict), errors.Is(err, raftstore.ErrQuorumAtRisk):
		code = tokenapi.CodeRefused
	case errors.Is(err, raftstore.ErrExhausted), errors.Is(err, tokenapi.ErrExhausted):
		code = tokenapi.CodeExhausted
	case errors.Is(err, raftstore.ErrNotLeader):
		code = tokenapi.CodeNotLeader
	case errors.Is(err, raftstore.ErrNoLeader), errors.Is(err, raftstore.ErrLeadershipLost), errors.Is(err, tokenapi.ErrNoQuorum),
		errors.Is(err, raftstore.ErrNotConfirmed):
		code = tokenapi.CodeNoQuorum
	case errors.Is(err, raftstore.ErrClosed), errors.Is(err, raftstore.ErrUnavailable), errors.Is(err, raftstore.ErrBatcherClosed),
		errors.Is(err, tokenapi.ErrUnavailable), errors.Is(err, tokenapi.ErrNotLeader),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		code = tokenapi.CodeUnavailable
		if errors.Is(err, tokenapi.ErrNotLeader) {
			code = tokenapi.CodeNotLeader
		}
	}
	msg := err.Error()
	if code == tokenapi.CodeUnauthenticated || code == tokenapi.CodeForbidden {
		// Nothing about the cluster for callers without the right role.
		return &tokenapi.APIError{Status: codeStatus(code), Code: code, Message: msg}
	}
	switch code {
	case tokenapi.CodeNoQuorum:
		if errors.Is(err, raftstore.ErrNotConfirmed) {
			msg = fmt.Sprintf("%v: node %s could not confirm with a majority of the voters that it still leads (%v); no token was handed out for this request, retry on another node or later",
				tokenapi.ErrNoQuorum, s.cfg.ID, err)
		} else if errors.Is(err, raftstore.ErrLeadershipLost) {
			// The entry was appended; a new leader may still commit it.
			msg = fmt.Sprintf("%v: node %s lost its leadership before the entry for this request was committed (%v); "+
				"the entry may still be committed by the next leader, and its tokens are then never handed out; retry, the retry gets a larger token",
				tokenapi.ErrNoQuorum, s.cfg.ID, err)
		} else {
			msg = fmt.Sprintf("%v: node %s cannot reach a quorum (%v); no entry was written for this request, retry on another node or later", tokenapi.ErrNoQuorum, s.cfg.ID, err)
		}
	case tokenapi.CodeNotLeader:
		msg = fmt.Sprintf("%v: node %s is not the leader or could not reach it (%v); retry on the leader", tokenapi.ErrNotLeader, s.cfg.ID, err)
	case tokenapi.CodeUnavailable:
		msg = fmt.Sprintf("%v: node %s: %v; retry", tokenapi.ErrUnavailable, s.cfg.ID, err)
	case tokenapi.CodeRefused:
		if !errors.Is(err, tokenapi.ErrRefused) {
			msg = fmt.Sprintf("%v: %v", tokenapi.ErrRefused, err)
		}
	case tokenapi.CodeExhausted:
		msg = fmt.Sprintf("%v: %v; no token was handed out for this request", tokenapi.ErrExhausted, err)
	case tokenapi.CodeInternal:
		msg = fmt.Sprintf("%v: node %s: %v", tokenapi.ErrInternal, s.cfg.ID, err)
	}
	leaderID, leaderAPI := s.leader()
	return &tokenapi.APIError{Status: codeStatus(code), Code: code, Message: msg, LeaderAPI: leaderAPI, LeaderID: leaderID}
}

func (s *Server) writeError(w http.ResponseWriter, err error) {
	ae := s.classify(err)
	s.metrics.refused(ae.Code)
	if ae.Code == tokenapi.CodeInternal {
		s.log.Error("request failed", "err", err)
	}
	writeJSON(w, ae.Status, tokenapi.ErrorResponse{Error: ae.Message, Code: ae.Code, LeaderAPI: ae.LeaderAPI, LeaderID: ae.LeaderID})
}

// hopsOf is how many times r was forwarded already, from its hops header.
// The header comes from whoever calls: a value that is not a count in
// 0..maxHops counts as maxHops, so that no caller can buy itself a longer
// forwarding chain (a negative count would otherwise bounce a request
// between two nodes that each think the other leads).
func hopsOf(r *http.Request) int {
	v := r.Header.Get(hopsHeader)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxHops {
		return maxHops
	}
	return n
}
