package tokenservice

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/raftstore"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// maxHops caps how many times a request is forwarded between nodes.
const maxHops = 2

// maxAllocCount caps the tokens one forwarded allocation may ask for; a
// leader refuses more. A node's batch limit (Config.MaxBatch) may not
// exceed it, so a follower never forwards a count the leader refuses.
const maxAllocCount = 1 << 20

// hopsHeader counts the forwards a request has been through.
const hopsHeader = "X-Fencegate-Hops"

// Server is one node of the token service: a raftstore.Store and the HTTP
// API in front of it.
type Server struct {
	cfg    Config
	log    *slog.Logger
	apiURL string
	// pending is the node before Raft starts; store once it runs.
	pending atomic.Pointer[raftstore.Pending]
	store   atomic.Pointer[raftstore.Store]
	// leaderBatch merges this node's and forwarded requests into one log
	// entry while it leads; fwdBatch merges this node's requests into one
	// forwarded call while it follows.
	leaderBatch, fwdBatch *raftstore.Batcher
	// readIndex hands out tokens from reserved ranges while this node
	// leads; nil with Config.CommitPerBatch.
	readIndex *raftstore.ReadIndex
	// confirmer asks the other voters in readIndex's rounds.
	confirmer *viewConfirmer
	// rounds is the confirmation rounds per second over the last second.
	rounds roundRate
	ln     net.Listener
	// limiter caps the API's connections (limits.go); ln serves through it.
	limiter *connLimiter
	srv     *http.Server
	// fwd carries every call to another node's API: forwarding, the
	// questions asked before founding or joining, address publishing and
	// the leader's questions to members. With TLS it presents this node's
	// peer certificate and accepts only peers.
	fwd     *http.Client
	probe   *httpProber
	metrics *metrics
	// raftLayer is the network Raft runs on (owned by the store); the
	// pre-check of a new member dials its Raft address through it.
	raftLayer raftstore.Layer
	// auth establishes request identities; nil without TLS (every route
	// open, for loopback only).
	auth *authenticator

	bgCtx       context.Context
	bgCancel    context.CancelFunc
	bg          sync.WaitGroup
	promoteKick chan struct{}

	proofs proofState // proof.go

	closeOnce sync.Once
	closeErr  error
	served    chan struct{}
}

// Start starts a node: it listens on the API address, then opens the
// node's store. A data directory that holds state resumes once peers that
// make a majority with it answered and none saw it hold more than it does
// (raftstore.ErrRolledBack: it was put back from an older copy). An empty one
// founds the cluster with Config.Peers or joins it with Config.Join,
// waiting for its peers as those fields say, while the API already answers
// them; Start returns once Raft runs, or with the reason it must not run
// (raftstore.ErrMustReplace, ErrWaitTimeout, ...). Nodes of one cluster
// started in one process must therefore be started concurrently. ctx
// bounds the start only.
//
// With Config.TLS the API serves https, Raft runs over mutual TLS and
// every call to another node presents this node's peer certificate; every
// request is authenticated (see Routes). An API or Raft address with port 0
// is given a free port (for a node that is never restarted; a real node
// restarts on its ports); Config.RaftListener and Config.APIListener hand
// Start listeners the caller bound.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	defer func() {
		// Listeners handed in are the node's: closed when it does not
		// start (closing one twice is harmless).
		if err != nil {
			for _, ln := range []net.Listener{cfg.APIListener, cfg.RaftListener} {
				if ln != nil {
					ln.Close()
				}
			}
		}
	}()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.APIListener != nil {
		cfg.APIAddr = cfg.APIListener.Addr().String()
	}
	if cfg.RaftListener != nil {
		cfg.RaftAddr = cfg.RaftListener.Addr().String()
	}
	// TLS and authentication (see auth.go, tlsconfig.go).
	hostPort, scheme, err := apiHostPort(cfg)
	if err != nil {
		return nil, &raftstore.FieldError{Fields: []string{"APIAddr"}, Err: err}
	}
	if err := checkSecurity(&cfg); err != nil {
		return nil, err
	}
	join := make([]string, len(cfg.Join))
	for i, u := range cfg.Join {
		if join[i], err = tokenclient.NormalizeURL(u); err != nil {
			return nil, &raftstore.FieldError{Fields: []string{"Join"}, Err: fmt.Errorf("%w: a member to join (Config.Join): %v", ErrBadConfig, err)}
		}
		join[i] = withScheme(join[i], scheme)
	}
	cfg.Join = join
	s := &Server{cfg: cfg, log: cfg.Logger, apiURL: scheme + "://" + hostPort, served: make(chan struct{}), promoteKick: make(chan struct{}, 1)}
	if cfg.TLS != nil {
		s.auth = &authenticator{creds: cfg.Credentials}
	}
	// Listen before opening the store, so a taken port fails before any
	// state is created.
	if s.ln = cfg.APIListener; s.ln == nil {
		if s.ln, err = raftstore.Listen("api", hostPort); err != nil {
			return nil, &raftstore.FieldError{Fields: []string{"APIAddr"}, Err: err}
		}
	}
	if _, port, _ := net.SplitHostPort(hostPort); port == "0" {
		s.apiURL = scheme + "://" + s.ln.Addr().String()
	}
	s.limiter = newConnLimiter(s.ln, cfg.MaxConns, cfg.MaxConnsPerIP, cfg.Logger)
	s.ln = s.limiter
	raftLn := cfg.RaftListener
	if raftLn == nil {
		if raftLn, err = raftstore.Listen("raft", cfg.RaftAddr); err != nil {
			s.ln.Close()
			return nil, &raftstore.FieldError{Fields: []string{"RaftAddr"}, Err: err}
		}
	}
	if _, port, _ := net.SplitHostPort(cfg.RaftAddr); port == "0" {
		cfg.RaftAddr = raftLn.Addr().String()
		s.cfg.RaftAddr = cfg.RaftAddr
	}
	fwdTransport := &http.Transport{
		DialContext:         cfg.Dial,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}
	if cfg.TLS != nil {
		s.ln = tls.NewListener(s.ln, cfg.TLS.serverTLS())
		s.raftLayer, err = raftstore.NewTLSLayer(raftLn, cfg.Dial, cfg.TLS.raftTLS(), raftstore.TLSLayerOptions{
			HandshakeTimeout: cfg.TransportTimeout, Logger: cfg.Logger, Members: s.raftMembers(),
		})
		if err != nil {
			raftLn.Close()
			s.ln.Close()
			return nil, err
		}
		fwdTransport.TLSClientConfig = cfg.TLS.forwardTLS()
		fwdTransport.TLSHandshakeTimeout = cfg.ForwardTimeout
	} else {
		s.raftLayer = raftstore.NewTCPLayer(raftLn, cfg.Dial)
	}
	s.fwd = &http.Client{Transport: fwdTransport}
	s.probe = &httpProber{hc: s.fwd, scheme: scheme, verify: cfg.TLS != nil}
	s.metrics = newMetrics(s)
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	scfg := cfg.Config
	scfg.APIAddr, scfg.Probe = s.apiURL, s.probe
	scfg.Layer = s.raftLayer // Prepare owns it from here, also when it fails
	pending, err := raftstore.Prepare(scfg)
	if err != nil {
		s.ln.Close()
		s.bgCancel()
		return nil, err
	}
	s.pending.Store(pending)
	// The API answers from now on: peers ask an empty node about itself
	// while it decides whether it may found or join.
	// The timeouts and caps bound what a caller without an identity can
	// hold (limits.go); no route streams or long-polls.
	s.srv = &http.Server{Handler: s.routes(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout,
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		ConnContext:    connContext, ConnState: connState,
		// TLS handshake failures ("http: TLS handshake error from ...")
		// land here; they carry no secret.
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelInfo)}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve api", "err", err)
		}
	}()
	st, err := pending.Start(ctx)
	if err != nil {
		_ = s.srv.Close()
		<-s.served
		s.fwd.CloseIdleConnections()
		s.bgCancel()
		return nil, err
	}
	alloc := s.allocate
	if !cfg.CommitPerBatch {
		s.confirmer = &viewConfirmer{s: s}
		s.readIndex = raftstore.NewReadIndex(st, s.confirmer, raftstore.ReadIndexConfig{
			ReserveSize: cfg.ReserveSize, RoundTimeout: cfg.RoundTimeout,
			// A reservation is an allocation entry whose tokens are handed
			// out later: it counts as minted when committed.
			OnReserve: func(r raftstore.Range, took time.Duration) { s.metrics.committed(r.Count, took) },
		})
		alloc = s.readIndex.Alloc
	}
	s.leaderBatch = raftstore.NewBatcher(alloc, raftstore.WithMaxBatch(cfg.MaxBatch), raftstore.WithMaxInflight(cfg.MaxInflight))
	s.fwdBatch = raftstore.NewBatcher(func(ctx context.Context, n int) (raftstore.Range, error) {
		return s.forwardAlloc(ctx, n, 1)
	}, raftstore.WithMaxBatch(cfg.MaxBatch), raftstore.WithMaxInflight(cfg.MaxInflight))
	s.store.Store(st)
	s.bg.Add(2)
	go s.promoteLoop()
	go s.publishLoop()
	if s.readIndex != nil {
		s.bg.Add(1)
		go s.roundRateLoop()
	}
	s.log.Info("serving", "id", cfg.ID, "api", s.apiURL, "raft", st.RaftAddr(), "tls", cfg.TLS != nil, "read_index", s.readIndex != nil,
		"bearer_credentials", cfg.Credentials.Len(), "max_conns", cfg.MaxConns, "max_conns_per_ip", cfg.MaxConnsPerIP)
	return s, nil
}

// ID returns the node's ID.
func (s *Server) ID() string { return s.cfg.ID }

// APIURL returns the base URL of the node's API ("http://HOST:PORT", or
// "https://HOST:PORT" with TLS).
func (s *Server) APIURL() string { return s.apiURL }

// RaftAddr returns the address the node's Raft transport listens on.
func (s *Server) RaftAddr() string { return s.Store().RaftAddr() }

// Store returns the node's Raft store (for status, snapshots and tests).
func (s *Server) Store() *raftstore.Store { return s.store.Load() }

// LocalStatus returns this node's own view of the cluster.
func (s *Server) LocalStatus() tokenapi.Status {
	st := s.Store()
	if st == nil {
		// Raft has not started: the node is deciding whether it may
		// found or join (its /readyz says what it waits for).
		state := "Starting"
		if p := s.pending.Load(); p != nil {
			ph := p.State().Phase
			state = strings.ToUpper(ph[:1]) + ph[1:]
		}
		return tokenapi.Status{StatusFields: tokenapi.StatusFields{ID: s.cfg.ID, State: state, Members: []tokenapi.Member{}}}
	}
	out := statusFrom(st.Status())
	if s.readIndex != nil {
		ris := s.readIndex.Stats()
		out.ReadIndex = &tokenapi.ReadIndexStatus{Range: ris.Range, RoundsPerSecond: s.rounds.get(), Rounds: ris.Rounds,
			RoundFailures: ris.RoundFailures, Reservations: ris.Reservations}
	}
	return out
}

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
		s.stopBackground()
		s.closeErr = errors.Join(errHTTP, s.Store().Close())
	})
	return s.closeErr
}

// Kill stops the node abruptly, for tests: listeners and connections are
// closed at once, no leadership transfer, no snapshot, no graceful leave.
func (s *Server) Kill() {
	s.closeOnce.Do(func() {
		s.Store().Kill()
		_ = s.srv.Close()
		<-s.served
		s.stopBackground()
	})
}

func (s *Server) stopBackground() {
	s.bgCancel()
	s.bg.Wait()
	s.leaderBatch.Close()
	s.fwdBatch.Close()
	if s.readIndex != nil {
		s.readIndex.Close()
		s.confirmer.streams.closeAll()
	}
	s.fwd.CloseIdleConnections()
}

// allocate commits one allocation entry and records it in the metrics.
func (s *Server) allocate(ctx context.Context, n int) (raftstore.Range, error) {
	t0 := time.Now()
	r, err := s.Store().Allocate(ctx, n)
	if err == nil {
		s.metrics.committed(r.Count, time.Since(t0))
	}
	return r, err
}

// next returns n tokens: committed here, merged with other requests, when
// this node leads; otherwise forwarded to the leader, merged likewise.
func (s *Server) next(ctx context.Context, n int) (raftstore.Range, error) {
	if s.Store().IsLeader() {
		r, err := s.leaderBatch.Next(ctx, n)
		if !errors.Is(err, raftstore.ErrNotLeader) {
			return r, err
		}
	}
	return s.fwdBatch.Next(ctx, n)
}

func statusFrom(st raftstore.Status) tokenapi.Status {
	out := tokenapi.Status{StatusFields: st.StatusFields}
	if out.Members == nil {
		out.Members = []tokenapi.Member{} // the answer lists no members as [], not null
	}
	return out
}

// scheme is the scheme of every node's API: https with TLS, else http.
func (s *Server) scheme() string {
	if s.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

// withScheme returns the URL u with scheme (http or https): with TLS every
// node serves https, whatever scheme an address was written or recorded
// with.
func withScheme(u, scheme string) string {
	if _, rest, ok := strings.Cut(u, "://"); ok {
		return scheme + "://" + rest
	}
	return scheme + "://" + u
}
