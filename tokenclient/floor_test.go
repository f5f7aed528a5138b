package tokenclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// Floor asks GET /v1/floor with the age as a Go duration, decodes the
// answer, fails a negative age without asking, and does not retry a 400.
func TestClientFloor(t *testing.T) {
	testutil.NeedServices(t)
	var calls atomic.Int32
	var lastAge atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Method != http.MethodGet || r.URL.Path != "/v1/floor" {
			http.NotFound(w, r)
			return
		}
		age := r.URL.Query().Get("age")
		lastAge.Store(age)
		w.Header().Set("Content-Type", "application/json")
		switch age {
		case "1h0m0s":
			w.Write([]byte(`{"floor":9007199254740993,"at":"2026-12-04T10:00:00.123456789Z","age":"1h0m0s","node_id":"n2"}`))
		case "720h0m0s":
			w.Write([]byte(`{"floor":0,"age":"720h0m0s","node_id":"n2"}`))
		default:
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"tokenservice: bad request: age is bad","code":"bad_request"}`))
		}
	}))
	defer srv.Close()
	c, err := tokenclient.NewClient([]string{srv.URL}, tokenclient.WithMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	a, err := c.FloorAt(ctx, time.Hour)
	want := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	if err != nil || a.Floor != 9007199254740993 || !a.At.Equal(want) || a.NodeID != "n2" || a.Age != time.Hour {
		t.Fatalf("FloorAt(1h) = %+v, %v", a, err)
	}
	if f, err := c.Floor(ctx, 30*24*time.Hour); err != nil || f != 0 {
		t.Fatalf("Floor(30d) = %d, %v; want 0", f, err)
	}
	n := calls.Load()
	if _, err := c.Floor(ctx, -time.Minute); !errors.Is(err, tokenapi.ErrBadRequest) || calls.Load() != n {
		t.Fatalf("Floor(-1m) = %v after %d calls; want tokenapi.ErrBadRequest without a call", err, calls.Load()-n)
	}
	if _, err := c.Floor(ctx, time.Second); !errors.Is(err, tokenapi.ErrBadRequest) || calls.Load() != n+1 {
		t.Fatalf("Floor answered 400: %v after %d calls; want tokenapi.ErrBadRequest, asked once", err, calls.Load()-n)
	}
}
