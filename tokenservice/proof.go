package tokenservice

import (
	"fmt"
	"sync/atomic"

	"github.com/fencegate/fencegate/tokenapi"
)

// Proofs: with Config.SigningKeys, every token the API hands out carries a
// proof beside it, "proof": "KEYID.HEX", the HMAC-SHA256 of (this cluster's
// id, the resource, the token) under the first key (package tokensign). A
// database that requires signed tokens verifies it inside the fence, so a
// token the service never minted, one minted for another resource, or one of
// another cluster is refused there. Signing happens on the node that answers
// the client, after the token's range is committed: it costs one HMAC per
// token and no Raft traffic.

// proofState is what a signing node caches: the cluster id, which never
// changes once recorded.
type proofState struct {
	clusterID atomic.Pointer[string]
}

// clusterIDForProofs returns the cluster id proofs are bound to, or an
// error when this node does not know it yet (a cluster whose first leader
// has not recorded it).
func (s *Server) clusterIDForProofs() (string, error) {
	if p := s.proofs.clusterID.Load(); p != nil {
		return *p, nil
	}
	st := s.Store()
	if st == nil {
		return "", fmt.Errorf("%w: node %s has not started Raft yet", tokenapi.ErrUnavailable, s.cfg.ID)
	}
	id := st.State().ClusterID
	if id == "" {
		return "", fmt.Errorf("%w: node %s does not know the cluster id yet, which signed tokens are bound to", tokenapi.ErrUnavailable, s.cfg.ID)
	}
	s.proofs.clusterID.Store(&id)
	return id, nil
}

// proofFor signs one token, or returns "" when the node has no keys.
func (s *Server) proofFor(resource string, token int64) (string, error) {
	if s.cfg.SigningKeys == nil {
		return "", nil
	}
	cid, err := s.clusterIDForProofs()
	if err != nil {
		return "", err
	}
	return s.cfg.SigningKeys.Sign(cid, resource, token), nil
}

// proofsFor signs the consecutive tokens first, first+1, ... of resources,
// or returns nil when the node has no keys.
func (s *Server) proofsFor(resources []string, first int64) ([]string, error) {
	if s.cfg.SigningKeys == nil {
		return nil, nil
	}
	cid, err := s.clusterIDForProofs()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(resources))
	for i, r := range resources {
		out[i] = s.cfg.SigningKeys.Sign(cid, r, first+int64(i))
	}
	return out, nil
}
