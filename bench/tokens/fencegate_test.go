package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
)

func TestRoundCountersAndReadiness(t *testing.T) {
	testutil.NeedServices(t) // a loopback HTTP server
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "# HELP x\nfencegate_token_rounds_total 10\nfencegate_token_round_seconds_total 0.5\nother 3\n")
	}))
	defer srv.Close()
	c := &fencegateCluster{urls: []string{srv.URL, srv.URL}, hc: srv.Client()}
	got, err := c.roundCounters(context.Background())
	if err != nil || got != (roundCounters{rounds: 20, seconds: 1}) {
		t.Errorf("roundCounters=%+v, %v; want 20 rounds in 1s", got, err)
	}
	if err := httpOK(nil, srv.URL+"/metrics")(context.Background()); err != nil {
		t.Errorf("httpOK(/metrics): %v", err)
	}
	if err := httpOK(nil, srv.URL+"/readyz")(context.Background()); err == nil {
		t.Error("httpOK accepted a 404")
	}
}
