package tokenservice_test

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/tokenservice"
)

// FuzzParsePeers parses any peers list: ParsePeers never panics, a list it
// accepts names each node once with an id, a HOST:PORT Raft address and an
// http(s) API URL, and written back as ID=RAFTADDR=APIADDR it parses to the
// same peers.
func FuzzParsePeers(f *testing.F) {
	f.Add("n1=127.0.0.1:7201=http://127.0.0.1:7101,n2=127.0.0.1:7202=127.0.0.1:7102")
	f.Add(" n1=[::1]:7201=https://[::1]:7101 , ")
	f.Add("n1=127.0.0.1:1")
	f.Add("n1=a:1=b:2,n1=c:3=d:4")
	f.Add("=h:1=h:2")
	f.Add("n1=h:1=http://h:2/path?q=1")
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := tokenservice.ParsePeers(s)
		if err != nil {
			return
		}
		var items []string
		seen := map[string]bool{}
		for _, p := range peers {
			if p.ID == "" || seen[p.ID] {
				t.Fatalf("ParsePeers(%q) = %+v: id %q empty or repeated", s, peers, p.ID)
			}
			seen[p.ID] = true
			if _, _, err := net.SplitHostPort(p.RaftAddr); err != nil {
				t.Fatalf("ParsePeers(%q): raft address %q: %v", s, p.RaftAddr, err)
			}
			if !strings.HasPrefix(p.APIAddr, "http://") && !strings.HasPrefix(p.APIAddr, "https://") {
				t.Fatalf("ParsePeers(%q): api address %q is not an http(s) URL", s, p.APIAddr)
			}
			items = append(items, p.ID+"="+p.RaftAddr+"="+p.APIAddr)
		}
		again, err := tokenservice.ParsePeers(strings.Join(items, ","))
		if err != nil || !slices.Equal(again, peers) {
			t.Fatalf("ParsePeers(%q) = %+v, written back %q parses to %+v, %v", s, peers, strings.Join(items, ","), again, err)
		}
	})
}
