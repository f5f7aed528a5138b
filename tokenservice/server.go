package tokenservice

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/fencegate/fencegate/raftstore"
)

// maxHops caps how many times a request is forwarded between nodes.
const maxHops = 2

// hopsHeader counts the forwards a request has been through.
const hopsHeader = "X-Fencegate-Hops"

// leaderHeader carries, on a successful token answer, the API URL of the
// leader, so clients can skip the forwarding hop next time; leaderIDHeader
// its ID, which a client over TLS requires of the node answering there.
const (
	leaderHeader   = "X-Fencegate-Leader-Api"
	leaderIDHeader = "X-Fencegate-Leader-Id"
)

// Server is one node of the token service: a raftstore.Store and the HTTP
// API in front of it.
type Server struct {
	cfg    Config
	log    *slog.Logger
	apiURL string
	store  *raftstore.Store
	// leaderBatch merges this node's and forwarded requests into one log
	// entry while it leads; fwdBatch merges this node's requests into one
	// forwarded call while it follows.
	leaderBatch, fwdBatch *raftstore.Batcher
	ln                    net.Listener
	srv                   *http.Server
	fwd                   *http.Client
	// auth establishes request identities; nil without TLS (every route
	// open, for loopback only).
	auth *authenticator

	closeOnce sync.Once
	closeErr  error
	served    chan struct{}
}

// Start opens the node's store (bootstrapping or resuming), listens on the
// API address and serves until Close or Kill. ctx bounds the start only.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if cfg.ID == "" || cfg.DataDir == "" || cfg.RaftAddr == "" || cfg.APIAddr == "" {
		return nil, fmt.Errorf("%w: id, data dir, raft address and api address are all required; set --id, --data-dir, --raft-addr and --api-addr", ErrBadConfig)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default().With("component", "tokenservice")
	}
	if cfg.Dial == nil {
		var d net.Dialer
		cfg.Dial = d.DialContext
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 5 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 4096
	}
	if cfg.MaxInflight <= 0 {
		cfg.MaxInflight = 1
	}
	// TLS and authentication (see auth.go, tlsconfig.go).
	hostPort, scheme, err := apiHostPort(cfg)
	if err != nil {
		return nil, err
	}
	if err := checkSecurity(&cfg); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, apiURL: scheme + "://" + hostPort, served: make(chan struct{})}
	if cfg.TLS != nil {
		s.auth = &authenticator{creds: cfg.Credentials}
	}
	// Listen before opening the store, so a taken port fails before any
	// state is created.
	s.ln, err = raftstore.Listen("api", hostPort, "--api-addr")
	if err != nil {
		return nil, err
	}
	if _, port, _ := net.SplitHostPort(hostPort); port == "0" {
		s.apiURL = scheme + "://" + s.ln.Addr().String()
	}
	scfg := cfg.storeConfig(s.apiURL)
	if cfg.TLS != nil {
		s.ln = tls.NewListener(s.ln, cfg.TLS.serverTLS())
		raftLn, err := raftstore.Listen("raft", cfg.RaftAddr, "--raft-addr")
		if err != nil {
			s.ln.Close()
			return nil, err
		}
		scfg.Layer, err = raftstore.NewTLSLayer(raftLn, cfg.Dial, cfg.TLS.raftTLS(), raftstore.TLSLayerOptions{
			HandshakeTimeout: cfg.TransportTimeout, Logger: cfg.Logger,
		})
		if err != nil {
			raftLn.Close()
			s.ln.Close()
			return nil, err
		}
	}
	s.store, err = raftstore.Open(scfg)
	if err != nil {
		s.ln.Close()
		return nil, err
	}
	s.leaderBatch = raftstore.NewBatcher(s.store.Allocate, raftstore.WithMaxBatch(cfg.MaxBatch), raftstore.WithMaxInflight(cfg.MaxInflight))
	s.fwdBatch = raftstore.NewBatcher(func(ctx context.Context, n int) (raftstore.Range, error) {
		return s.forwardAlloc(ctx, n, 1)
	}, raftstore.WithMaxBatch(cfg.MaxBatch), raftstore.WithMaxInflight(cfg.MaxInflight))
	fwdTransport := &http.Transport{
		DialContext:         cfg.Dial,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	if cfg.TLS != nil {
		fwdTransport.TLSClientConfig = cfg.TLS.forwardTLS()
		fwdTransport.TLSHandshakeTimeout = cfg.ForwardTimeout
	}
	s.fwd = &http.Client{Transport: fwdTransport}
	s.srv = &http.Server{Handler: s.routes(), ReadHeaderTimeout: 10 * time.Second,
		// TLS handshake failures ("http: TLS handshake error from ...")
		// land here; they carry no secret.
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelInfo)}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve api", "err", err)
		}
	}()
	s.log.Info("serving", "id", cfg.ID, "api", s.apiURL, "raft", s.store.RaftAddr(), "tls", cfg.TLS != nil,
		"bearer_credentials", cfg.Credentials.Len())
	return s, nil
}

// ID returns the node's ID.
func (s *Server) ID() string { return s.cfg.ID }

// APIURL returns the base URL of the node's API ("http://HOST:PORT").
func (s *Server) APIURL() string { return s.apiURL }

// RaftAddr returns the address the node's Raft transport listens on.
func (s *Server) RaftAddr() string { return s.store.RaftAddr() }

// Store returns the node's Raft store (for status, snapshots and tests).
func (s *Server) Store() *raftstore.Store { return s.store }

// LocalStatus returns this node's own view of the cluster.
func (s *Server) LocalStatus() Status { return statusFrom(s.store.Status()) }

// Close shuts the node down cleanly: the API stops accepting and finishes
// in-flight requests (up to 5s), a leader hands over leadership, and the
// store is closed. Close is idempotent.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		errHTTP := s.srv.Shutdown(ctx)
		if errHTTP != nil {
			errHTTP = s.srv.Close()
		}
		<-s.served
		s.leaderBatch.Close()
		s.fwdBatch.Close()
		s.fwd.CloseIdleConnections()
		s.closeErr = errors.Join(errHTTP, s.store.Close())
	})
	return s.closeErr
}

// Kill stops the node abruptly, for tests: listeners and connections are
// closed at once, no leadership transfer, no snapshot, no graceful leave.
func (s *Server) Kill() {
	s.closeOnce.Do(func() {
		s.store.Kill()
		_ = s.srv.Close()
		<-s.served
		s.leaderBatch.Close()
		s.fwdBatch.Close()
		s.fwd.CloseIdleConnections()
	})
}

// next returns n tokens: committed here, merged with other requests, when
// this node leads; otherwise forwarded to the leader, merged likewise.
func (s *Server) next(ctx context.Context, n int) (raftstore.Range, error) {
	if s.store.IsLeader() {
		r, err := s.leaderBatch.Next(ctx, n)
		if !errors.Is(err, raftstore.ErrNotLeader) {
			return r, err
		}
	}
	return s.fwdBatch.Next(ctx, n)
}

func statusFrom(st raftstore.Status) Status {
	out := Status{
		ID: st.ID, LeaderID: st.LeaderID, LeaderAPI: st.LeaderAPI, State: st.State, Term: st.Term,
		LastIndex: st.LastIndex, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, LastToken: st.LastToken,
		Members: []Member{},
	}
	for _, m := range st.Members {
		out.Members = append(out.Members, Member(m))
	}
	return out
}
