package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenservice"
)

// A library error that names Config fields gets the flags that set them,
// and keeps its sentinels.
func TestServeHintNamesFlags(t *testing.T) {
	o := &tokenServeOpts{id: "n1", raftAddr: "127.0.0.1:7201", apiAddr: "127.0.0.1:7101", tls: &tlsFlags{}}
	for _, tc := range []struct {
		err      error
		sentinel error
		want     string
	}{
		{&raftstore.FieldError{Fields: []string{"Peers", "ID"}, Err: fmt.Errorf("%w: the peers list does not name this node", raftstore.ErrBadConfig)},
			raftstore.ErrBadConfig, "set by --peers and --id"},
		{&raftstore.FieldError{Fields: []string{"APIAddr"}, Err: fmt.Errorf("%w: api address in use", raftstore.ErrAddrInUse)},
			raftstore.ErrAddrInUse, "set by --api-addr"},
		{fmt.Errorf("%w: n1 lost its data", raftstore.ErrMustReplace), raftstore.ErrMustReplace, "--join API-URL-OF-A-MEMBER"},
		{fmt.Errorf("%w: nothing to start from", raftstore.ErrNoFounding), raftstore.ErrNoFounding, "give --peers"},
		{tokenservice.ErrBadConfig, tokenservice.ErrBadConfig, ""},
	} {
		got := serveHint(tc.err, o)
		if !errors.Is(got, tc.sentinel) {
			t.Errorf("serveHint(%v) = %v: lost %v", tc.err, got, tc.sentinel)
		}
		if !strings.HasPrefix(got.Error(), tc.err.Error()) || !strings.Contains(got.Error(), tc.want) {
			t.Errorf("serveHint(%v) = %q; want the message and then %q", tc.err, got, tc.want)
		}
	}
	if serveHint(nil, o) != nil {
		t.Error("serveHint(nil) is not nil")
	}
}
