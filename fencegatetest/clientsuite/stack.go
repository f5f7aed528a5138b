// Package clientsuite starts the stack the test suites of the Python and
// Node.js clients run against and names it to the suite in environment
// variables: the stack of package fencegatetest (a token cluster, a fenced
// database behind the gate), with the client tables, and what a client's
// suite needs besides: redis-servers (with a password, with TLS, several
// for Redlock), a TLS front with client certificates and a credential, a Go
// peer that holds locks and writes beside the suite, a link to PostgreSQL
// the suite can cut, and a token service that signs its tokens. Only the
// clients' Go test drivers and benchmarks use it.
package clientsuite

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/fencegatetest"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/fencegate/fencegate/proxy"
	"github.com/fencegate/fencegate/proxy/proxytest"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
	"github.com/redis/go-redis/v9"
)

// Tables the client tests write, and the resource expression that protects
// each: a row of accounts with id X belongs to resource "account:X", a row
// of counters with id X to "counter:X", a request to the account it
// charges, a transfer to its source account. The tests take the lock of
// exactly that resource before they write the row; PostgreSQL refuses the
// write otherwise (FG002).
var tables = []struct{ create, name, resource string }{
	{"CREATE TABLE accounts (id text PRIMARY KEY, balance bigint NOT NULL)", "accounts", "'account:' || id"},
	{"CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0)", "counters", "'counter:' || id"},
	{"CREATE TABLE requests (id text PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL)", "requests", "'account:' || account"},
	{"CREATE TABLE transfers (id text PRIMARY KEY, src text NOT NULL, dst text NOT NULL, cents bigint NOT NULL)", "transfers", "'account:' || src"},
}

// Database prepares a fresh database for the client tests and returns three
// DSNs: app, the one fenced transactions use (an application role, through
// the fencegate proxy); appDirect, the same role straight to PostgreSQL (the
// tables are protected on that path too); and admin, straight to the same
// database as the administrator (the tests read through it and make errors
// of every fencegate SQLSTATE with it).
//
// As an administrator would: install schema fencegate with the application
// role's grants, create the tables (owned by the administrator, not by the
// application role), protect each with its resource expression, and grant
// the application role SELECT, INSERT, UPDATE and DELETE on them.
func Database(t testing.TB) (app, appDirect, admin string) {
	t.Helper()
	testutil.NeedServices(t)
	d := pgfencetest.New(t)
	createTables(t, d)
	return proxytest.Start(t, d.AppDSN, quietProxy(t)), d.AppDSN, d.DSN
}

// createTables creates, protects and grants the tables of the client tests
// in d.
func createTables(t testing.TB, d *pgfencetest.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn := d.Admin(t)
	for _, tb := range tables {
		if _, err := conn.Exec(ctx, tb.create); err != nil {
			t.Fatalf("create table %s: %v", tb.name, err)
		}
		if err := pgfence.Protect(ctx, conn, tb.name, tb.resource); err != nil {
			t.Fatalf("protect %s: %v", tb.name, err)
		}
		if _, err := conn.Exec(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+tb.name+" TO "+d.App); err != nil {
			t.Fatalf("grant %s: %v", tb.name, err)
		}
	}
}

// Stack is everything a client's tests talk to, started by the Go test
// that runs them.
type Stack struct {
	name       string // the client: "node", "python"
	cluster    *tokenservicetest.Cluster
	redisAddr  string // the shared Redis
	prefix     string // this test's key prefix on it (cleaned up at the end)
	redlock    []*testutil.RedisServer
	app, admin string
	appDirect  string
	certs      *certs
	tlsFront   *httptest.Server
	credFile   string
	authRedis  string // redis://:PASSWORD@127.0.0.1:PORT
	tlsRedis   string // rediss://127.0.0.1:PORT?ssl_ca_certs=CA
	peer       *peer
	signed     *signed
	cut        *cut
}

// Start starts the stack for the tests of the client name ("node",
// "python": it names the credential, the certificates and the signing key
// the suite finds) and stops it when t ends.
func Start(t *testing.T, name string) *Stack {
	t.Helper()
	testutil.NeedServices(t)
	s := &Stack{name: name}
	s.redisAddr, s.prefix = testutil.Redis(t)
	for range 3 {
		s.redlock = append(s.redlock, testutil.StartRedis(t))
	}
	fs := fencegatetest.StartServers(t, fencegatetest.WithLogger(quiet(t)))
	createTables(t, fs.DB)
	s.cluster, s.app, s.appDirect, s.admin = fs.Tokens, fs.ProxyDSN, fs.DB.AppDSN, fs.DB.DSN
	s.certs = newCerts(t, name)
	s.startTLSFront(t)

	// The password is set once the server answers (StartRedis waits for a
	// PING without one).
	pw := testutil.RandomName("pw")
	authSrv := testutil.StartRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: authSrv.Addr()})
	defer rc.Close()
	if err := rc.ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatalf("set a password on %s: %v", authSrv, err)
	}
	s.authRedis = "redis://:" + pw + "@" + authSrv.Addr()

	tlsPort := testutil.FreePort(t)
	testutil.StartRedis(t, "--tls-port", strconv.Itoa(tlsPort),
		"--tls-cert-file", s.certs.ServerCert, "--tls-key-file", s.certs.ServerKey,
		"--tls-ca-cert-file", s.certs.CA, "--tls-auth-clients", "no")
	s.tlsRedis = "rediss://127.0.0.1:" + strconv.Itoa(tlsPort) + "?ssl_ca_certs=" + url.QueryEscape(s.certs.CA)

	s.peer = startPeer(t, s)
	s.signed = startSigned(t, name)
	s.cut = startCut(t, s.appDirect)
	return s
}

// startTLSFront serves the token API over TLS, requiring a client
// certificate signed by the test CA and a bearer token, in front of the
// cluster: what a secured token service asks of a client.
func (s *Stack) startTLSFront(t *testing.T) {
	t.Helper()
	// A client credential file as the token service's clients use: one
	// line "NAME SECRET", sent as "Authorization: Bearer NAME:SECRET".
	secret := testutil.RandomName("s") + testutil.RandomName("") + testutil.RandomName("")
	s.credFile = filepath.Join(t.TempDir(), "credentials")
	user := s.name + "-test"
	if err := os.WriteFile(s.credFile, []byte("# the "+s.name+" tests' credential\n"+user+" "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	target, err := url.Parse(s.cluster.APIURL(0))
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	// The nodes name the leader's plain-HTTP address; behind the front a
	// client must not be sent there.
	rp.ModifyResponse = func(r *http.Response) error {
		r.Header.Del("X-Fencegate-Leader-Api")
		return nil
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+user+":"+secret {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "bearer credentials missing or wrong", "code": "unauthenticated"})
			return
		}
		rp.ServeHTTP(w, r)
	})
	s.tlsFront = httptest.NewUnstartedServer(h)
	s.tlsFront.TLS = &tls.Config{
		Certificates: []tls.Certificate{s.certs.server},
		ClientCAs:    s.certs.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
	s.tlsFront.Config.ErrorLog = slog.NewLogLogger(quiet(t).With("component", "tls-front").Handler(), slog.LevelInfo)
	s.tlsFront.StartTLS()
	t.Cleanup(s.tlsFront.Close)
}

// Env is what the client's tests read (clients/python/tests/support.py,
// clients/node/test/support.js), as NAME=VALUE.
func (s *Stack) Env() []string {
	var redlock []string
	for _, r := range s.redlock {
		redlock = append(redlock, "redis://"+r.Addr())
	}
	return append([]string{
		"FENCEGATE_TEST_REDIS_URL=redis://" + s.redisAddr,
		"FENCEGATE_TEST_KEY_PREFIX=" + s.prefix,
		"FENCEGATE_TEST_REDLOCK_URLS=" + strings.Join(redlock, ","),
		"FENCEGATE_TEST_TOKEN_SERVERS=" + strings.Join(s.cluster.APIURLs(), ","),
		"FENCEGATE_TEST_DSN=" + s.app,
		"FENCEGATE_TEST_ADMIN_DSN=" + s.admin,
		"FENCEGATE_TEST_APP_DIRECT_DSN=" + s.appDirect,
		"FENCEGATE_TEST_GO_PEER=" + s.peer.url,
		"FENCEGATE_TEST_TLS_TOKEN_URL=" + s.tlsFront.URL,
		"FENCEGATE_TEST_TLS_CA=" + s.certs.CA,
		"FENCEGATE_TEST_TLS_CERT=" + s.certs.ClientCert,
		"FENCEGATE_TEST_TLS_KEY=" + s.certs.ClientKey,
		"FENCEGATE_TEST_TLS_SERVER_CERT=" + s.certs.ServerCert,
		"FENCEGATE_TEST_TLS_SERVER_KEY=" + s.certs.ServerKey,
		"FENCEGATE_TEST_CREDENTIALS=" + s.credFile,
		"FENCEGATE_TEST_REDIS_AUTH_URL=" + s.authRedis,
		"FENCEGATE_TEST_REDIS_TLS_URL=" + s.tlsRedis,
		"FENCEGATE_TEST_REDIS_TLS_CA=" + s.certs.CA,
	}, append(s.signed.env(), s.cut.env()...)...)
}

// quiet is the servers' logger: warnings and errors only, so that a failed
// client suite's log shows the suite's own lines rather than every Raft
// election and every refusal the tests provoke on purpose.
func quiet(t testing.TB) *slog.Logger { return testutil.LoggerAt(t, slog.LevelWarn) }

func quietProxy(t testing.TB) proxytest.Option {
	return proxytest.WithConfig(func(c *proxy.Config) { c.Logger = quiet(t).With("component", "proxy") })
}
