package raftstore

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/fencegate/fencegate/tokenapi"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// MembersFunc returns the current Raft configuration of the node a TLS
// layer serves, read when called: a peer is admitted only while its node is
// in it (see TLSLayerOptions.Members). It returns ErrNotRunning while the
// node has no Raft running yet, and an empty list while Raft runs without a
// configuration (a joining node before the leader's first contact).
type MembersFunc func() ([]tokenapi.Peer, error)

// ErrNotRunning is returned by a MembersFunc while the node's Raft has not
// started: its configuration is not known yet.
var ErrNotRunning = errors.New("raftstore: raft is not running yet")

// errPeerRefused closes a Raft connection whose peer or RPC the layer refused.
var errPeerRefused = errors.New("raftstore: raft peer refused")

// RaftMembers returns the servers of this node's latest Raft configuration
// (committed or not, as hashicorp/raft applies it), voters and non-voters,
// with their Raft addresses; a TLS layer admits peers from it.
func (s *Store) RaftMembers() ([]tokenapi.Peer, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("read configuration: %w", translate(err))
	}
	var out []tokenapi.Peer
	for _, srv := range f.Configuration().Servers {
		out = append(out, tokenapi.Peer{ID: string(srv.ID), RaftAddr: string(srv.Address)})
	}
	return out, nil
}

// PeerID returns the node a peer certificate names: its CN, the convention
// tokenservice and internal/pki share (a node's certificate has CN = its
// Raft ID).
func PeerID(cs tls.ConnectionState) string {
	if len(cs.PeerCertificates) == 0 {
		return ""
	}
	return cs.PeerCertificates[0].Subject.CommonName
}

// admit decides whether node may speak Raft to this node now: it must be
// named, and in the current configuration. Without a MembersFunc every peer the TLS
// configuration accepted is admitted. While Raft has not started the
// decision waits (up to wait), since the configuration is not known yet.
func (l *tlsLayer) admit(node string, wait time.Duration) error {
	if node == "" {
		return fmt.Errorf("%w: the peer certificate names no node (empty CN)", errPeerRefused)
	}
	if l.members == nil {
		return nil
	}
	deadline := time.Now().Add(wait)
	for {
		ms, err := l.members()
		switch {
		case err == nil:
			return checkMember(ms, node)
		case !errors.Is(err, ErrNotRunning) || time.Now().After(deadline):
			return fmt.Errorf("%w: cannot check that node %q is a member: %v", errPeerRefused, node, err)
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-l.ctx.Done():
			return net.ErrClosed
		}
	}
}

// checkMember reports whether node is in ms; an empty configuration (a
// joining node before the leader's first contact) admits any peer.
func checkMember(ms []tokenapi.Peer, node string) error {
	if len(ms) == 0 || slices.ContainsFunc(ms, func(s tokenapi.Peer) bool { return s.ID == node }) {
		return nil
	}
	return fmt.Errorf("%w: node %q is not in this node's Raft configuration (a removed node's certificate stays valid until it expires)", errPeerRefused, node)
}

// peerConn is an accepted Raft connection whose peer certificate names
// node. Its Read hands hashicorp/raft's transport the bytes of one RPC at a
// time, each only after the RPC's header was read the way the transport
// reads it (the same msgpack codec, handle and types) and checked: the RPC
// must be sent by node (header ID, and no other member's Raft address), and
// node must still be a member. Anything else closes the connection before
// the transport sees a byte of that RPC. Responses pass unchanged.
type peerConn struct {
	net.Conn
	node  string
	layer *tlsLayer

	rec  recorder
	dec  *codec.Decoder
	out  []byte // bytes of the checked RPC not yet read by the transport
	data int64  // snapshot bytes that follow the checked InstallSnapshot
	err  error  // once set, every Read returns it
}

func newPeerConn(c *tls.Conn, node string, l *tlsLayer) *peerConn {
	pc := &peerConn{Conn: c, node: node, layer: l}
	pc.rec.br = bufio.NewReaderSize(c, 64*1024)
	pc.dec = codec.NewDecoder(&pc.rec, &codec.MsgpackHandle{})
	return pc
}

// ConnectionState returns the TLS state of the connection.
func (c *peerConn) ConnectionState() tls.ConnectionState {
	return c.Conn.(*tls.Conn).ConnectionState()
}

// Node returns the node the connection's peer certificate names.
func (c *peerConn) Node() string { return c.node }

func (c *peerConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if len(c.out) == 0 && c.data > 0 {
		n := int64(len(p))
		n = min(n, c.data)
		got, err := c.rec.br.Read(p[:n])
		c.data -= int64(got)
		return got, err
	}
	if len(c.out) == 0 {
		if err := c.next(); err != nil {
			c.err = err
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.layer.refused(c.RemoteAddr(), err)
				c.Conn.Close()
				// The transport logs errors other than EOF as decoding
				// failures; the layer has said why.
				c.err = io.EOF
			}
			return 0, c.err
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// next reads and checks the next RPC, leaving its bytes in out.
func (c *peerConn) next() error {
	typ, err := c.rec.br.ReadByte()
	if err != nil {
		return err
	}
	c.rec.buf = append(c.rec.buf[:0], typ)
	var (
		hdr     raft.RPCHeader
		legacy  []byte // the deprecated sender address field, when the RPC has one
		snap    int64
		command any
	)
	switch typ {
	case rpcAppendEntries:
		var req raft.AppendEntriesRequest
		command = &req
		err = c.dec.Decode(&req)
		hdr, legacy = req.RPCHeader, req.Leader
	case rpcRequestVote:
		var req raft.RequestVoteRequest
		command = &req
		err = c.dec.Decode(&req)
		hdr, legacy = req.RPCHeader, req.Candidate
	case rpcInstallSnapshot:
		var req raft.InstallSnapshotRequest
		command = &req
		err = c.dec.Decode(&req)
		hdr, legacy, snap = req.RPCHeader, req.Leader, req.Size
	case rpcTimeoutNow:
		var req raft.TimeoutNowRequest
		command = &req
		err = c.dec.Decode(&req)
		hdr = req.RPCHeader
	case rpcRequestPreVote:
		var req raft.RequestPreVoteRequest
		command = &req
		err = c.dec.Decode(&req)
		hdr = req.RPCHeader
	default:
		return fmt.Errorf("%w: node %q sent an unknown RPC type %d", errPeerRefused, c.node, typ)
	}
	if err != nil {
		return fmt.Errorf("%w: node %q sent an RPC that does not decode: %v", errPeerRefused, c.node, err)
	}
	if snap < 0 {
		return fmt.Errorf("%w: node %q sent a snapshot of negative size", errPeerRefused, c.node)
	}
	if err := c.checkSender(rpcName(command), hdr, legacy); err != nil {
		return err
	}
	c.out, c.data = c.rec.buf, snap
	c.rec.buf = nil
	return nil
}

// checkSender checks that an RPC's header names the node of the
// connection's certificate and that this node is still a member.
func (c *peerConn) checkSender(what string, hdr raft.RPCHeader, legacy []byte) error {
	if string(hdr.ID) != c.node {
		return fmt.Errorf("%w: %s claims to come from node %q over a connection of node %q", errPeerRefused, what, hdr.ID, c.node)
	}
	if len(hdr.Addr) == 0 {
		return fmt.Errorf("%w: %s of node %q names no sender address", errPeerRefused, what, c.node)
	}
	if len(legacy) > 0 && string(legacy) != string(hdr.Addr) {
		return fmt.Errorf("%w: %s of node %q names two sender addresses, %q and %q", errPeerRefused, what, c.node, hdr.Addr, legacy)
	}
	if c.layer.members == nil {
		return nil
	}
	ms, err := c.layer.members()
	if err != nil {
		return fmt.Errorf("%w: cannot check that node %q is a member: %v", errPeerRefused, c.node, err)
	}
	if err := checkMember(ms, c.node); err != nil {
		return fmt.Errorf("%w (it sent %s)", err, what)
	}
	for _, m := range ms {
		if m.ID != c.node && m.RaftAddr == string(hdr.Addr) {
			return fmt.Errorf("%w: %s of node %q gives the Raft address %s of member %q as its own", errPeerRefused, what, c.node, hdr.Addr, m.ID)
		}
	}
	return nil
}

func rpcName(command any) string {
	switch command.(type) {
	case *raft.AppendEntriesRequest:
		return "AppendEntries"
	case *raft.RequestVoteRequest:
		return "RequestVote"
	case *raft.InstallSnapshotRequest:
		return "InstallSnapshot"
	case *raft.TimeoutNowRequest:
		return "TimeoutNow"
	case *raft.RequestPreVoteRequest:
		return "RequestPreVote"
	}
	return "RPC"
}

// The RPC type bytes of hashicorp/raft's NetworkTransport (v1.7.2,
// net_transport.go); they are part of its wire format.
const (
	rpcAppendEntries uint8 = iota
	rpcRequestVote
	rpcInstallSnapshot
	rpcTimeoutNow
	rpcRequestPreVote
)

// recorder is the reader the codec decodes an RPC from: it records every
// byte the codec consumed, and only those (the codec reads a ByteScanner
// byte-exactly, as the transport relies on for snapshot data), so the
// transport receives exactly the bytes that were checked.
type recorder struct {
	br  *bufio.Reader
	buf []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

func (r *recorder) ReadByte() (byte, error) {
	b, err := r.br.ReadByte()
	if err == nil {
		r.buf = append(r.buf, b)
	}
	return b, err
}

func (r *recorder) UnreadByte() error {
	if err := r.br.UnreadByte(); err != nil {
		return err
	}
	r.buf = r.buf[:len(r.buf)-1]
	return nil
}

// checkDialled checks, after a dial, that the peer answering at a member's
// Raft address presents that member's certificate: a certificate of
// another node (a removed one whose old address a member now uses) cannot
// answer for it.
func (l *tlsLayer) checkDialled(addr string, tc *tls.Conn) error {
	if l.members == nil {
		return nil
	}
	ms, err := l.members()
	if err != nil {
		return nil // not running: the caller checks who answered (members add)
	}
	got := PeerID(tc.ConnectionState())
	for _, m := range ms {
		if m.RaftAddr == addr && m.ID != got {
			return fmt.Errorf("%w: the Raft address %s is member %q's but the certificate there names %q", errPeerRefused, addr, m.ID, got)
		}
	}
	return nil
}
