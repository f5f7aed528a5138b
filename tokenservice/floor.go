package tokenservice

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
)

// ParseAge parses the age of GET /v1/floor: a Go duration ("90m",
// "720h") or a whole number of days ("30d"), zero or more.
func ParseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("%w: no age given; ask GET /v1/floor?age=DURATION, e.g. age=24h or age=30d", tokenapi.ErrBadRequest)
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int64
		n, err = strconv.ParseInt(days, 10, 64)
		if err == nil && (n < 0 || n > int64(1<<63-1)/int64(24*time.Hour)) {
			err = fmt.Errorf("out of range")
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: age %q is not a duration (give e.g. 90m, 24h or 30d): %v", tokenapi.ErrBadRequest, s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%w: age %q is negative; give 0 or more", tokenapi.ErrBadRequest, s)
	}
	return d, nil
}

// handleFloor answers GET /v1/floor?age=DURATION from this node's applied
// state, on any node: see DESIGN.md, "Floor".
func (s *Server) handleFloor(w http.ResponseWriter, r *http.Request) {
	age, err := ParseAge(r.URL.Query().Get("age"))
	if err != nil {
		s.writeError(w, err)
		return
	}
	floor, at, err := s.Store().Floor(age)
	if err != nil {
		s.writeError(w, err)
		return
	}
	resp := tokenapi.FloorResponse{Floor: floor, Age: age.String(), NodeID: s.cfg.ID}
	if !at.IsZero() {
		resp.At = at.UTC().Format(time.RFC3339Nano)
	}
	writeJSON(w, http.StatusOK, resp)
}
