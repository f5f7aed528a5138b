package tokenservice_test

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// viewStreamConn opens GET /v1/internal/view-stream on the node at base
// (https://HOST:PORT) with leaf's certificate; upgrade false leaves out the
// Upgrade headers. It returns the status code and, after a 101, the
// connection's reader and writer; a node that ends the TLS handshake
// refusing the certificate gives code 0.
func viewStreamConn(t *testing.T, ca *pki.CA, leaf *pki.Leaf, base string, upgrade bool) (int, *bufio.Reader, io.WriteCloser) {
	t.Helper()
	cfg := tokenclient.ClientTLSConfig(ca.Pool(), leaf.TLSCertificate())
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(base, "https://"), cfg)
	if err != nil {
		t.Logf("TLS handshake: %v", err)
		return 0, nil, nil
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET /v1/internal/view-stream HTTP/1.1\r\nHost: " + strings.TrimPrefix(base, "https://") + "\r\n"
	if upgrade {
		req += "Connection: Upgrade\r\nUpgrade: fencegate-view/1\r\n"
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Logf("answer: %v", err) // TLS 1.3 reports a refused certificate here
		return 0, nil, nil
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		resp.Body.Close()
	}
	return resp.StatusCode, br, conn
}

// askView puts question seq and reads the answer's fields.
func askView(t *testing.T, br *bufio.Reader, w io.Writer, seq uint64) (gotSeq, term uint64, flags byte, node, leader string) {
	t.Helper()
	if err := binary.Write(w, binary.BigEndian, seq); err != nil {
		t.Fatal(err)
	}
	var head [17]byte
	if _, err := io.ReadFull(br, head[:]); err != nil {
		t.Fatalf("question %d: %v", seq, err)
	}
	readID := func() string {
		var n uint16
		if err := binary.Read(br, binary.BigEndian, &n); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	node = readID()
	return binary.BigEndian.Uint64(head[:]), binary.BigEndian.Uint64(head[8:]), head[16], node, readID()
}

// A view stream answers a member's questions, each with the node's term
// and leader read when it answers, under the same identity checks as GET
// /v1/internal/view: a client's certificate, a removed member's and a
// certificate of another cluster get 403, and the route without the
// Upgrade headers answers 400.
func TestViewStream(t *testing.T) {
	ca := newCA(t, "shared")
	prod := pki.Options{Cluster: "prod"}
	c := startNamedCluster(t, ca, prod)
	leader := c.Leader(t)
	follower, member := (leader+1)%3, (leader+2)%3
	base := c.APIURL(follower)

	code, br, w := viewStreamConn(t, ca, issuePeer(t, ca, c.ID(member), prod), base, true)
	if code != http.StatusSwitchingProtocols {
		t.Fatalf("a member's view stream: %d; want 101", code)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		st := c.Node(follower).LocalStatus()
		gotSeq, term, flags, node, lid := askView(t, br, w, seq*7)
		if gotSeq != seq*7 || term != st.Term || flags != 0 || node != c.ID(follower) || lid != c.ID(leader) {
			t.Errorf("answer to %d: seq %d term %d flags %d node %q leader %q; want %d, %d, 0, %q, %q",
				seq*7, gotSeq, term, flags, node, lid, seq*7, st.Term, c.ID(follower), c.ID(leader))
		}
	}

	if code, _, _ := viewStreamConn(t, ca, issuePeer(t, ca, c.ID(member), prod), base, false); code != http.StatusBadRequest {
		t.Errorf("view stream without Upgrade headers: %d; want 400", code)
	}
	client, err := ca.Issue("app", []string{string(tokenapi.RoleClient)}, nil, prod)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		leaf *pki.Leaf
	}{
		{"a client's certificate", client},
		{"a peer certificate of another cluster", issuePeer(t, ca, c.ID(member), pki.Options{Cluster: "staging"})},
		{"a peer certificate of no member", issuePeer(t, ca, "n9", prod)},
	} {
		if code, _, _ := viewStreamConn(t, ca, tc.leaf, base, true); code != http.StatusForbidden && code != 0 {
			t.Errorf("view stream with %s: %d; want 403 or the handshake refused", tc.name, code)
		}
	}
	if t.Failed() {
		return
	}
	// The stream still answers; then the cluster mints through streams.
	if gotSeq, _, _, _, _ := askView(t, br, w, 99); gotSeq != 99 {
		t.Errorf("answer to 99 has seq %d", gotSeq)
	}
	app := c.Client(t, tokenclient.WithTLS(tokenclient.ClientTLSConfig(ca.Pool(), client.TLSCertificate())))
	toks := tokenservicetest.Mint(t, app, 50)
	for i := 1; i < len(toks); i++ {
		if toks[i] <= toks[i-1] {
			t.Fatalf("tokens not increasing: %v", toks)
		}
	}
}
