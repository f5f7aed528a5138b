package tokenservice

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
)

// fakeViewNode answers view questions as a node would, for unit tests of
// the leader's end; mode picks how it misbehaves.
type fakeViewNode struct {
	mode        string // "", "mute" (never answers), "none" (no stream route), "close" (ends each stream after one answer), "last" (flags the first answer last), "seq" (wrong sequence number)
	opens, gets atomic.Int32
}

var fakeView = raftstore.View{NodeID: "n2", Term: 7, LeaderID: "n1"}

func (f *fakeViewNode) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/internal/view":
		f.gets.Add(1)
		json.NewEncoder(w).Encode(fakeView)
		return
	case "/v1/internal/view-stream":
		if f.mode == "none" {
			f.opens.Add(1)
			http.NotFound(w, r)
			return
		}
	default:
		http.NotFound(w, r)
		return
	}
	f.opens.Add(1)
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + viewStreamProto + "\r\n\r\n")
	brw.Flush()
	var q [8]byte
	for {
		if _, err := io.ReadFull(brw.Reader, q[:]); err != nil {
			return
		}
		seq := binary.BigEndian.Uint64(q[:])
		if f.mode == "mute" {
			io.Copy(io.Discard, brw.Reader) // until the leader closes
			return
		}
		if f.mode == "seq" {
			seq++
		}
		conn.Write(appendViewAnswer(nil, seq, fakeView, f.mode == "last"))
		if f.mode == "close" || f.mode == "last" {
			return
		}
	}
}

func newFakeConfirmer(t *testing.T, mode string) (*viewConfirmer, *fakeViewNode, tokenapi.Peer) {
	f := &fakeViewNode{mode: mode}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s := &Server{probe: &httpProber{hc: srv.Client()}}
	c := &viewConfirmer{s: s}
	t.Cleanup(c.streams.closeAll)
	return c, f, tokenapi.Peer{ID: "n2", APIAddr: strings.TrimPrefix(srv.URL, "http://")}
}

// The leader's end of view streams: one stream carries many questions; a
// kept stream its node closed is replaced without failing the question; a
// last answer is not reused; a node without the route is asked with GET
// for a while; an answer to another question is refused. A stream outlives
// the context of the question that opened it.
func TestViewStreamLeaderEnd(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		mode              string
		wantOpens, wantGs int32
		wantErr           bool
	}{
		{"", 1, 0, false},
		{"close", 5, 0, false},
		{"last", 5, 0, false},
		{"none", 1, 5, false},
		{"seq", 5, 0, true},
	} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			c, f, v := newFakeConfirmer(t, tc.mode)
			for i := range 5 {
				// Each round's context ends with the round; the
				// stream it opened outlives it.
				qctx, cancel := context.WithCancel(ctx)
				view, err := c.View(qctx, v)
				cancel()
				if tc.wantErr {
					if err == nil {
						t.Fatalf("question %d: %+v, no error; want refused", i, view)
					}
					continue
				}
				if err != nil || view != fakeView {
					t.Fatalf("question %d: %+v, %v; want %+v", i, view, err, fakeView)
				}
			}
			if got := f.opens.Load(); got != tc.wantOpens {
				t.Errorf("streams opened (or tried): %d; want %d", got, tc.wantOpens)
			}
			if got := f.gets.Load(); got != tc.wantGs {
				t.Errorf("GET /v1/internal/view: %d; want %d", got, tc.wantGs)
			}
		})
	}
}

// A question whose node does not answer ends with its context, and the
// stream is not kept.
func TestViewStreamQuestionEndsWithContext(t *testing.T) {
	c, f, v := newFakeConfirmer(t, "mute")
	for range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		_, err := c.View(ctx, v)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a mute node: %v; want the context's deadline", err)
		}
	}
	if got := f.opens.Load(); got != 2 {
		t.Errorf("streams opened: %d; want 2 (a stream whose question ended unanswered is not kept)", got)
	}
}

// An answer is read whole whatever the IDs' lengths (none is cut short: a
// cut ID could read as another node's), and a truncated one is an error.
func TestViewAnswerRoundTrip(t *testing.T) {
	var buf [64]byte
	for _, v := range []raftstore.View{
		{NodeID: "n1", Term: 1, LeaderID: ""},
		{NodeID: strings.Repeat("x", 300), Term: 1 << 63, LeaderID: strings.Repeat("y", 300) + "z"},
		{NodeID: strings.Repeat("x", maxViewID), Term: 2, LeaderID: "n1"},
	} {
		b := appendViewAnswer(nil, 42, v, true)
		got, last, err := readViewAnswer(bufio.NewReader(strings.NewReader(string(b))), 42, buf[:])
		if err != nil || got != v || !last {
			t.Errorf("%+v: read %+v last=%v err=%v", v, got, last, err)
		}
		if _, _, err := readViewAnswer(strings.NewReader(string(b[:len(b)-1])), 42, buf[:]); err == nil {
			t.Errorf("%+v truncated: no error", v)
		}
	}
}
