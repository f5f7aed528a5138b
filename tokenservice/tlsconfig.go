package tokenservice

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/tlsfiles"
	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// NodeTLS is a node's TLS material: the cluster CA, which signs every node,
// client and admin certificate, and the node's own certificate, which it
// presents as a server (API and Raft) and as a client (Raft, forwarding).
// Build it with LoadNodeTLS; Start checks it against the node's ID and
// addresses.
type NodeTLS struct {
	// CA verifies the certificates of peers and clients.
	CA *x509.CertPool
	// Cert is this node's certificate (OU=peer, CN=its ID) and key.
	Cert tls.Certificate
	// CertFile names the certificate in error messages ("" for one made in memory).
	CertFile string
}

// LoadNodeTLS reads a node's CA, certificate and key files and checks them
// now, not at the first connection: each file readable and PEM, the key
// matching the certificate, the certificate and the CA valid today, and the
// certificate signed by the CA. The error names the file and what is wrong.
func LoadNodeTLS(caFile, certFile, keyFile string) (*NodeTLS, error) {
	if caFile == "" || certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%w: a node needs all three of the CA, its certificate and its key", tokenapi.ErrBadTLS)
	}
	pool, err := tlsfiles.LoadCA(caFile)
	if err != nil {
		return nil, err
	}
	pair, err := tlsfiles.LoadPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	if err := tlsfiles.VerifyLeaf(pair.Leaf, pool, certFile, caFile); err != nil {
		return nil, err
	}
	return &NodeTLS{CA: pool, Cert: pair, CertFile: certFile}, nil
}

// checkNode verifies that the node's certificate is a peer certificate for
// node id whose subject alternative names cover the hosts it advertises.
func (n *NodeTLS) checkNode(id string, addrs ...string) error {
	name := n.CertFile
	if name == "" {
		name = "(in memory)"
	}
	leaf := n.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(n.Cert.Certificate[0]); err != nil {
			return fmt.Errorf("%w: certificate %s: %v", tokenapi.ErrBadTLS, name, err)
		}
		n.Cert.Leaf = leaf
	}
	if !slices.Contains(tokenapi.RolesOf(leaf), tokenapi.RolePeer) {
		return fmt.Errorf("%w: certificate %s has roles %v; a node needs a peer certificate (OU=peer, CN=%s)", tokenapi.ErrBadTLS, name, tokenapi.RolesOf(leaf), id)
	}
	if leaf.Subject.CommonName != id {
		return fmt.Errorf("%w: certificate %s is for node %q (CN) but this node's ID is %q; give node %s its own certificate", tokenapi.ErrBadTLS, name, leaf.Subject.CommonName, id, id)
	}
	if len(leaf.ExtKeyUsage) > 0 && (!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth)) {
		return fmt.Errorf("%w: certificate %s is not valid for both serverAuth and clientAuth; a node's certificate needs both (it serves and dials)", tokenapi.ErrBadTLS, name)
	}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(a, "https://"), "http://"))
		if err != nil || host == "" {
			continue
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			continue
		}
		if err := leaf.VerifyHostname(host); err != nil {
			return fmt.Errorf("%w: certificate %s does not name %s (it names %s); peers reach this node there, so issue it with that address", tokenapi.ErrBadTLS, name, host, strings.Join(sansOf(leaf), ", "))
		}
	}
	if _, err := pki.ClusterOf(leaf); err != nil {
		return fmt.Errorf("%w: certificate %s: %v", tokenapi.ErrBadTLS, name, err)
	}
	if left := time.Until(leaf.NotAfter); left < 30*24*time.Hour {
		// Not an error yet: the caller logs it.
		return &expiringError{file: name, at: leaf.NotAfter}
	}
	return nil
}

// expiringError reports a certificate that expires within 30 days.
type expiringError struct {
	file string
	at   time.Time
}

func (e *expiringError) Error() string {
	return fmt.Sprintf("certificate %s expires on %s; issue a new one before then", e.file, e.at.UTC().Format(time.DateOnly))
}

func sansOf(c *x509.Certificate) []string {
	out := slices.Clone(c.DNSNames)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	if len(out) == 0 {
		out = []string{"no host"}
	}
	return out
}

// cluster returns the cluster this node's certificate names ("" for none;
// see pki.ClusterURI). checkNode has refused a certificate whose name
// cannot be read, so a failure here reads as a name no peer has.
func (n *NodeTLS) cluster() string {
	leaf := n.Cert.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(n.Cert.Certificate[0]); err != nil {
			return "\x00unreadable"
		}
	}
	c, err := pki.ClusterOf(leaf)
	if err != nil {
		return "\x00unreadable"
	}
	return c
}

// errOtherCluster refuses a certificate of another cluster under the same CA.
var errOtherCluster = errors.New("tokenservice: certificate of another cluster")

// clusterText names a cluster in messages.
func clusterText(c string) string {
	if c == "" {
		return "no cluster"
	}
	return fmt.Sprintf("cluster %q", c)
}

// verifyPeer is the VerifyConnection of every connection between nodes
// (Raft both ways, calls to other nodes' APIs): the other side must hold
// the peer role and name the same cluster as this node's certificate,
// exactly: a certificate that names none is a peer only of nodes whose
// certificates name none (clusters set up before certificates named their
// cluster), never of a named cluster.
func (n *NodeTLS) verifyPeer(cs tls.ConnectionState) error {
	if err := tokenclient.RequirePeerRole(cs); err != nil {
		return err
	}
	leaf := cs.PeerCertificates[0]
	theirs, err := pki.ClusterOf(leaf)
	if err != nil {
		return fmt.Errorf("%w: %v", errOtherCluster, err)
	}
	if ours := n.cluster(); theirs != ours {
		return fmt.Errorf("%w: the peer certificate of %q names %s, this node's names %s", errOtherCluster, leaf.Subject.CommonName, clusterText(theirs), clusterText(ours))
	}
	return nil
}

// verifyClient is the API's VerifyConnection: a client certificate (any
// role) that names another cluster than this node's is refused in the
// handshake. One that names none is accepted here, so clients keep working
// while a cluster moves to named certificates; the peer role of such a
// certificate counts only on nodes whose own certificate names none
// (peerStanding in auth.go).
func (n *NodeTLS) verifyClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return nil // bearer credentials, or no identity: the routes decide
	}
	leaf := cs.PeerCertificates[0]
	theirs, err := pki.ClusterOf(leaf)
	if err != nil {
		return fmt.Errorf("%w: %v", errOtherCluster, err)
	}
	if ours := n.cluster(); theirs != "" && theirs != ours {
		return fmt.Errorf("%w: the certificate of %q names %s, this node's names %s", errOtherCluster, leaf.Subject.CommonName, clusterText(theirs), clusterText(ours))
	}
	return nil
}

// serverTLS is the API's TLS configuration: client certificates are
// verified when presented (bearer credentials need none).
func (n *NodeTLS) serverTLS() *tls.Config {
	return &tls.Config{
		Certificates:     []tls.Certificate{n.Cert},
		ClientCAs:        n.CA,
		ClientAuth:       tls.VerifyClientCertIfGiven,
		MinVersion:       tls.VersionTLS12,
		NextProtos:       []string{"http/1.1"},
		VerifyConnection: n.verifyClient,
	}
}

// raftTLS is the Raft layer's configuration: mutual, peers of this
// cluster only. Which peers may speak Raft is decided after the handshake,
// by the layer, from the live configuration (raftMembers).
func (n *NodeTLS) raftTLS() *tls.Config {
	return &tls.Config{
		Certificates:     []tls.Certificate{n.Cert},
		RootCAs:          n.CA,
		ClientCAs:        n.CA,
		ClientAuth:       tls.RequireAndVerifyClientCert,
		MinVersion:       tls.VersionTLS13,
		VerifyConnection: n.verifyPeer,
	}
}

// forwardTLS is the configuration of calls to other nodes' APIs: this node
// presents its certificate and accepts only peers of its cluster; which
// peer is checked per request (forward.go).
func (n *NodeTLS) forwardTLS() *tls.Config {
	cfg := tokenclient.ClientTLSConfig(n.CA, n.Cert)
	cfg.VerifyConnection = n.verifyPeer
	return cfg
}

// joinRefresh is how long a joining node trusts the leader it was told
// of before it asks again (see raftMembers).
const joinRefresh = time.Second

// raftMembers returns the membership the Raft layer admits peers from
// (raftstore.TLSLayerOptions.Members): the node's latest Raft
// configuration, or raftstore.ErrNotRunning until Raft runs.
//
// A joining node runs Raft without a configuration until the leader's
// first contact. Meanwhile it admits one peer only: the leader the
// committed configuration names, asked over the API of the members it
// joins through (the answer counts only from the certificate of the leader
// it names, see httpProber). The answer is trusted for joinRefresh and
// then asked again, at most one question in flight, so a node removed
// while this one waits for `members add`, or a leader deposed meanwhile,
// is a stranger within a second: no one but the current leader can be the
// first to reach a joining node. Failed questions are not repeated within
// joinRefresh either, so strangers knocking cannot make it ask faster.
func (s *Server) raftMembers() raftstore.MembersFunc {
	var (
		mu     sync.Mutex
		leader []tokenapi.Peer
		err    error
		asked  time.Time
	)
	return func() ([]tokenapi.Peer, error) {
		st := s.Store()
		if st == nil {
			return nil, raftstore.ErrNotRunning
		}
		ms, e := st.RaftMembers()
		if e != nil || len(ms) > 0 {
			return ms, e
		}
		mu.Lock()
		defer mu.Unlock()
		if asked.IsZero() || time.Since(asked) >= joinRefresh {
			leader, err = s.joinLeader()
			asked = time.Now()
		}
		return leader, err
	}
}

// joinLeader returns the leader of the committed configuration, the one
// peer a joining node admits.
func (s *Server) joinLeader() ([]tokenapi.Peer, error) {
	conf, err := s.committedConfiguration()
	if err != nil {
		return nil, err
	}
	for _, m := range conf.Members {
		if m.ID == conf.LeaderID {
			return []tokenapi.Peer{{ID: m.ID, RaftAddr: m.RaftAddr}}, nil
		}
	}
	return nil, fmt.Errorf("the committed configuration names leader %q, which is not among its members", conf.LeaderID)
}

// committedConfiguration asks the members this node joins through
// (Config.Join) for the leader's committed configuration; a node given no
// Join asks its peers. Never both: --peers keeps the founding list, which
// may name a member removed since, and a removed member's certificate
// still verifies; answering for itself as leader, it would be believed
// (the answer counts only from the certificate of the leader it names). A
// Join contact that is a current member names only the current leader.
func (s *Server) committedConfiguration() (raftstore.Configuration, error) {
	contacts := slices.Clone(s.cfg.Join)
	if len(contacts) == 0 {
		for _, p := range s.cfg.Peers {
			if p.ID != s.cfg.ID && !slices.Contains(contacts, p.APIAddr) {
				contacts = append(contacts, p.APIAddr)
			}
		}
	}
	var errs []error
	for _, api := range contacts {
		ctx, cancel := context.WithTimeout(s.bgCtx, 4*time.Second)
		conf, err := s.probe.Configuration(ctx, api)
		cancel()
		if err == nil && len(conf.Members) > 0 {
			return conf, nil
		}
		if err == nil {
			err = errors.New("an empty configuration")
		}
		errs = append(errs, fmt.Errorf("%s: %w", api, err))
	}
	return raftstore.Configuration{}, fmt.Errorf("this node has no Raft configuration yet and no member gave the committed one: %w", errors.Join(errs...))
}

// apiHostPort returns the API's HOST:PORT and scheme: https with TLS, http
// without. An address given with the other scheme is refused.
func apiHostPort(cfg Config) (hostPort, scheme string, err error) {
	scheme = "http"
	if cfg.TLS != nil {
		scheme = "https"
	}
	hostPort = strings.TrimSuffix(strings.TrimSpace(cfg.APIAddr), "/")
	if given, rest, ok := strings.Cut(hostPort, "://"); ok {
		if given != scheme {
			if cfg.TLS != nil {
				return "", "", fmt.Errorf("%w: api address %s says %s but the API serves https (TLS is configured); give it as HOST:PORT", ErrBadConfig, cfg.APIAddr, given)
			}
			return "", "", fmt.Errorf("%w: api address %s says %s but the API serves plain HTTP (no TLS configured); give it as HOST:PORT", ErrBadConfig, cfg.APIAddr, given)
		}
		hostPort = rest
	}
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return "", "", fmt.Errorf("%w: api address %q is not HOST:PORT", ErrBadConfig, cfg.APIAddr)
	}
	return hostPort, scheme, nil
}

// checkSecurity checks the TLS and credential settings of a node before
// anything listens. A node without TLS may bind an address other hosts can
// reach only with Config.InsecurePlaintext; it then logs the routes open to
// anyone there. With TLS, the peers' API addresses become https.
func checkSecurity(cfg *Config) error {
	if cfg.TLS == nil {
		if cfg.Credentials != nil {
			return fmt.Errorf("%w: bearer credentials need TLS (a CA, a certificate and a key): secrets must not cross the network in clear, and nodes identify each other by certificate", ErrBadConfig)
		}
		var exposed []string
		for _, a := range []string{cfg.APIAddr, cfg.RaftAddr} {
			if !tlsfiles.IsLoopback(a) {
				exposed = append(exposed, a)
			}
		}
		if len(exposed) == 0 {
			return nil
		}
		if !cfg.InsecurePlaintext {
			return &raftstore.FieldError{Fields: []string{"InsecurePlaintext", "APIAddr", "RaftAddr"},
				Err: fmt.Errorf("%w: no TLS on %s, which other hosts can reach: anyone there could mint tokens and speak Raft to this node; configure TLS (a CA, a certificate and a key), bind to 127.0.0.1, or accept plain HTTP off loopback explicitly (Config.InsecurePlaintext)",
					ErrBadConfig, strings.Join(exposed, " and "))}
		}
		var open []string
		for _, rt := range Routes() {
			if PlaintextOpen(rt) {
				open = append(open, rt.Method+" "+rt.Path)
			}
		}
		cfg.Logger.Warn("INSECURE PLAINTEXT: no TLS on an address other hosts can reach; anyone who reaches "+strings.Join(exposed, " and ")+
			" can call the routes listed here and speak Raft to this node; routes that change state answer only to loopback and to the hosts of the cluster's members",
			"open_to_anyone", strings.Join(open, ", "))
		return nil
	}
	if err := cfg.TLS.checkNode(cfg.ID, cfg.APIAddr, cfg.RaftAddr); err != nil {
		var exp *expiringError
		if !errors.As(err, &exp) {
			return err
		}
		cfg.Logger.Warn(exp.Error())
	}
	peers := slices.Clone(cfg.Peers)
	for i, p := range peers {
		if rest, ok := strings.CutPrefix(p.APIAddr, "http://"); ok {
			peers[i].APIAddr = "https://" + rest
		}
	}
	cfg.Peers = peers
	return nil
}
