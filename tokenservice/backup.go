package tokenservice

import (
	"fmt"
	"net/http"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// handleSnapshot reads the cluster id and the counter on the leader after
// a barrier: the counter is then at least every token handed out before
// the request. Only the leader answers.
func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) {
	b, err := s.Store().Backup(r.Context())
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tokenapi.Snapshot{
		Format: tokenapi.SnapshotFormat, ClusterID: b.ClusterID, Counter: b.Counter, Index: b.Index, Term: b.Term,
		Time: time.Now().UTC(), Leader: s.cfg.ID,
	})
}

// handleRestore commits an entry that raises the counter to at least the
// value asked; it never lowers it. Only the leader answers.
func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) {
	var req tokenapi.RestoreRequest
	if err := decodeBody(r, &req); err != nil {
		s.writeError(w, err)
		return
	}
	if req.AtLeast < 0 {
		s.writeError(w, fmt.Errorf("%w: at_least %d is negative", tokenapi.ErrBadRequest, req.AtLeast))
		return
	}
	res, err := s.Store().RaiseCounter(r.Context(), req.AtLeast)
	if err != nil {
		s.writeError(w, err)
		return
	}
	s.log.Info("counter raised by restore", "at_least", req.AtLeast, "before", res.Before, "after", res.After, "index", res.Index)
	writeJSON(w, http.StatusOK, tokenapi.Restored{AtLeast: req.AtLeast, Before: res.Before, After: res.After, Index: res.Index, Term: res.Term})
}
