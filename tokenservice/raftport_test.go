package tokenservice_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// dialOnly is a raft.StreamLayer that only dials, with dial.
type dialOnly struct {
	dial   func(addr string) (net.Conn, error)
	closed chan struct{}
}

func (d *dialOnly) Dial(addr raft.ServerAddress, _ time.Duration) (net.Conn, error) {
	return d.dial(string(addr))
}
func (d *dialOnly) Accept() (net.Conn, error) { <-d.closed; return nil, net.ErrClosed }
func (d *dialOnly) Close() error              { close(d.closed); return nil }
func (d *dialOnly) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }

// Must show: the Raft port does not accept a connection without a valid
// peer certificate. A stranger speaks real Raft RPCs (hashicorp/raft's own
// transport) to the leader's Raft port over raw TCP, TLS without a
// certificate, TLS with a peer certificate of another CA, and TLS with the
// cluster's own client and admin certificates; each asks for a vote in a
// term far ahead, which any node that accepted the RPC would adopt. None is
// answered and no node's term moves. The same RPC with a peer certificate
// of a member, speaking for that member, is answered: the probe itself
// works.
func TestRaftPortRefusesWithoutPeerCertificate(t *testing.T) {
	t.Parallel()
	ca, other := newCA(t, "cluster"), newCA(t, "attacker")
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, nil))
	leader := c.Leader(t)
	target := c.Node(leader).RaftAddr()
	termBefore := c.Node(leader).LocalStatus().Term

	cert := func(ca *pki.CA, name string, role tokenapi.Role) *tls.Certificate {
		leaf, err := ca.Issue(name, []string{string(role)}, []string{"127.0.0.1"}, pki.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tc := leaf.TLSCertificate()
		return &tc
	}
	tlsDial := func(cert *tls.Certificate) func(string) (net.Conn, error) {
		return func(addr string) (net.Conn, error) {
			cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} // the stranger trusts anyone
			if cert != nil {
				cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
			}
			d := &net.Dialer{Timeout: 2 * time.Second}
			return tls.DialWithDialer(d, "tcp", addr, cfg)
		}
	}
	attempts := []struct {
		name    string
		dial    func(string) (net.Conn, error)
		control bool
	}{
		{"raw TCP", func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) }, false},
		{"TLS without a certificate", tlsDial(nil), false},
		{"TLS with a peer certificate of another CA", tlsDial(cert(other, c.ID((leader+1)%3), tokenapi.RolePeer)), false},
		{"TLS with a client certificate of the cluster CA", tlsDial(cert(ca, c.ID((leader+1)%3), tokenapi.RoleClient)), false},
		{"TLS with an admin certificate of the cluster CA", tlsDial(cert(ca, "ops", tokenapi.RoleAdmin)), false},
		{"control: TLS with a member's peer certificate of the cluster CA", tlsDial(cert(ca, c.ID((leader+1)%3), tokenapi.RolePeer)), true},
	}
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
				Stream: &dialOnly{dial: a.dial, closed: make(chan struct{})}, MaxPool: 1, Timeout: 2 * time.Second,
				Logger: hclog.NewNullLogger(),
			})
			defer trans.Close()
			term := termBefore + 1000
			if a.control {
				term = 0 // stale: answered, and harmless
			}
			req := &raft.RequestVoteRequest{
				RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(c.ID((leader + 1) % 3)), Addr: []byte(c.Node((leader + 1) % 3).RaftAddr())},
				Term:      term, LastLogIndex: 1 << 40, LastLogTerm: term,
			}
			var resp raft.RequestVoteResponse
			err := trans.RequestVote(raft.ServerID(c.ID(leader)), raft.ServerAddress(target), req, &resp)
			if a.control {
				if err != nil || resp.Term < termBefore {
					t.Fatalf("RequestVote with a peer certificate: %v (term %d); the probe does not reach Raft", err, resp.Term)
				}
				return
			}
			if err == nil {
				t.Fatalf("RequestVote answered (term %d, granted %v): the Raft port accepted the connection", resp.Term, resp.Granted)
			}
			t.Logf("refused: %v", err)
		})
	}
	for i := range c.Len() {
		if term := c.Node(i).LocalStatus().Term; term >= termBefore+1000 {
			t.Errorf("%s moved to term %d: a stranger's vote request reached Raft", c.ID(i), term)
		}
	}
}
