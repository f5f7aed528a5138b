package clientsuite

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/netfault"
	"github.com/fencegate/fencegate/proxy/proxytest"
)

// cut is a netfault.PGCutter in front of PostgreSQL, a gate whose upstream
// goes through it, and an HTTP control the client suites arm it with: the
// suites cut the link around COMMIT straight to PostgreSQL and between the
// gate and PostgreSQL (where the gate answers for the server it lost).
type cut struct {
	direct, gate string // the application role's DSNs: through the cutter, and through the gate over it
	control      *httptest.Server
}

// startCut starts the cutter in front of appDirect's server, a gate over
// it and the control: POST /arm?word=W&point=before|after-server|after-answer
// arms it; POST /fired waits (at most 10 s) until the armed cut happened
// (200) or not (504).
func startCut(t *testing.T, appDirect string) *cut {
	t.Helper()
	u, err := url.Parse(appDirect)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := netfault.NewPGCutter(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	direct, err := pc.DSN(appDirect)
	if err != nil {
		t.Fatal(err)
	}
	c := &cut{direct: direct, gate: proxytest.Start(t, direct, quietProxy(t))}
	var mu sync.Mutex
	var fired <-chan struct{}
	points := map[string]netfault.CutPoint{"before": netfault.CutBefore, "after-server": netfault.CutAfterServer, "after-answer": netfault.CutAfterAnswer}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /arm", func(w http.ResponseWriter, r *http.Request) {
		p, ok := points[r.URL.Query().Get("point")]
		word := r.URL.Query().Get("word")
		if !ok || word == "" {
			http.Error(w, "want word=W&point=before|after-server|after-answer", http.StatusBadRequest)
			return
		}
		mu.Lock()
		fired = pc.Arm(word, p)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /fired", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		f := fired
		mu.Unlock()
		if f == nil {
			http.Error(w, "not armed", http.StatusBadRequest)
			return
		}
		select {
		case <-f:
			w.WriteHeader(http.StatusOK)
		case <-time.After(10 * time.Second):
			http.Error(w, "the armed cut did not happen within 10 s", http.StatusGatewayTimeout)
		}
	})
	c.control = httptest.NewServer(mux)
	t.Cleanup(c.control.Close)
	return c
}

func (c *cut) env() []string {
	return []string{
		"FENCEGATE_TEST_CUT_DIRECT_DSN=" + c.direct,
		"FENCEGATE_TEST_CUT_GATE_DSN=" + c.gate,
		"FENCEGATE_TEST_CUT_CONTROL=" + c.control.URL,
	}
}
