package lockclient

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/redis/go-redis/v9"
)

const (
	testDefaultPassword = "d3fault-Pw%/@:x" // characters a URL must escape
	testACLUser         = "locker"
	testACLPassword     = "acl-s3cret-9f2"
)

// startRedisProc starts a redis-server on a free port with the arguments
// args(port) returns, and waits until ready(addr) succeeds. It is killed
// when the test ends.
func startRedisProc(t *testing.T, args func(port int) []string, ready func(addr string) error) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found on PATH: install the redis-server package")
	}
	port := testutil.FreePort(t)
	base := []string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""}
	cmd := exec.Command(bin, append(base, args(port)...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	testutil.WaitFor(t, 10*time.Second, "redis-server on "+addr, func() error {
		select {
		case <-exited:
			t.Fatalf("redis-server exited: %s", out.String())
		default:
		}
		return ready(addr)
	})
	return addr
}

func pingWith(o *redis.Options) error {
	c := redis.NewClient(o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// startAuthRedis starts a redis-server whose default user needs
// testDefaultPassword and with an ACL user testACLUser allowed only on keys
// under lock:*.
func startAuthRedis(t *testing.T) string {
	t.Helper()
	return startRedisProc(t, func(port int) []string {
		return []string{"--port", strconv.Itoa(port), "--requirepass", testDefaultPassword,
			"--user", testACLUser, "on", ">" + testACLPassword, "~lock:*", "+@all"}
	}, func(addr string) error {
		return pingWith(&redis.Options{Addr: addr, Password: testDefaultPassword, MaxRetries: -1})
	})
}

// captureLog returns a logger that records every line at debug level.
// go-redis logs from its own goroutines (a dial outlives the request that
// asked for it), so the record is locked.
func captureLog(t *testing.T) (*slog.Logger, *lockedBuffer) {
	buf := &lockedBuffer{}
	h := slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(h), buf
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func mustNotContainSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{testDefaultPassword, testACLPassword, "d3fault", "s3cret"} {
		if strings.Contains(s, secret) {
			t.Fatalf("%s carries a password: %s", what, s)
		}
	}
}

// TestDialURLForms: the forms Dial accepts become the right go-redis
// options; bad input is refused with one line that names what is wrong and
// carries no password.
func TestDialURLForms(t *testing.T) {
	o := defaultOptions()
	for _, tc := range []struct {
		addr           string
		wantAddr       string
		user, pass     string
		db             int
		tls            bool
		wantErr        string
		wantRedacted   string
		wantServerName string
	}{
		{addr: "127.0.0.1:6379", wantAddr: "127.0.0.1:6379"},
		{addr: "redis://127.0.0.1:6380/2", wantAddr: "127.0.0.1:6380", db: 2},
		{addr: "redis://alice:pw@10.0.0.1:6379", wantAddr: "10.0.0.1:6379", user: "alice", pass: "pw"},
		{addr: "redis://:pw@h:1", wantAddr: "h:1", pass: "pw"},
		{addr: "redis://alice:d3fault-Pw%25%2F%40%3Ax@h:1/0", wantAddr: "h:1", user: "alice", pass: testDefaultPassword},
		{addr: "rediss://bob:pw@redis.example:6390/1", wantAddr: "redis.example:6390", user: "bob", pass: "pw", db: 1, tls: true, wantServerName: "redis.example"},
		{addr: "rediss://[::1]:6390", wantAddr: "[::1]:6390", tls: true, wantServerName: "::1"},
		{addr: "redis://h:1?pool_size=3", wantAddr: "h:1"},
		{addr: "unix://alice:pw@/run/redis.sock?db=2", wantAddr: "/run/redis.sock", user: "alice", pass: "pw", db: 2},
		{addr: "localhost", wantErr: "want host:port or a redis://, rediss:// or unix:// URL"},
		{addr: "alice:d3fault@h:6379", wantErr: "credentials need a URL", wantRedacted: "xxxxx@h:6379"},
		{addr: "http://alice:d3fault@h:6379", wantErr: "invalid URL scheme", wantRedacted: "http://alice:xxxxx@h:6379"},
		{addr: "redis://alice:d3fault@h:6379/x", wantErr: "invalid database number", wantRedacted: "redis://alice:xxxxx@h:6379/x"},
		{addr: "redis://alice:d3fault@h:6379?max_retries=3", wantErr: "max_retries is not supported"},
		{addr: "redis://alice:d3fault@h:6379?dial_timeout=1s", wantErr: "dial_timeout is not supported"},
		{addr: "redis://alice:d3fault@h:6379?bogus=1", wantErr: "bogus"},
		{addr: "redis://alice:d3fault%zz@h:6379", wantErr: "not a valid URL", wantRedacted: "redis://alice:xxxxx@h:6379"},
		{addr: "redis://alice:d3fault@h:port", wantErr: "not a valid URL", wantRedacted: "redis://alice:xxxxx@h:port"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			ro, err := redisOptions(tc.addr, &o)
			if tc.wantErr != "" {
				if err == nil {
					t.Fatalf("redisOptions(%q) accepted", tc.addr)
				}
				full := fmt.Errorf("lockclient: Redis address 1 (%s): %w", redactAddr(tc.addr), err).Error()
				if !strings.Contains(full, tc.wantErr) {
					t.Fatalf("error %q, want it to contain %q", full, tc.wantErr)
				}
				if strings.Contains(full, "d3fault") || strings.Contains(full, "\n") {
					t.Fatalf("error is not one line without the password: %q", full)
				}
				if tc.wantRedacted != "" && !strings.Contains(full, tc.wantRedacted) {
					t.Fatalf("error %q, want the address shown as %q", full, tc.wantRedacted)
				}
				return
			}
			if err != nil {
				t.Fatalf("redisOptions(%q): %v", tc.addr, err)
			}
			if ro.Addr != tc.wantAddr || ro.Username != tc.user || ro.Password != tc.pass || ro.DB != tc.db {
				t.Fatalf("addr=%q user=%q pass=%q db=%d, want %q %q %q %d", ro.Addr, ro.Username, ro.Password, ro.DB,
					tc.wantAddr, tc.user, tc.pass, tc.db)
			}
			if (ro.TLSConfig != nil) != tc.tls {
				t.Fatalf("TLS=%v, want %v", ro.TLSConfig != nil, tc.tls)
			}
			if tc.tls && ro.TLSConfig.ServerName != tc.wantServerName {
				t.Fatalf("ServerName=%q, want %q", ro.TLSConfig.ServerName, tc.wantServerName)
			}
			if ro.MaxRetries != -1 || ro.DialTimeout != o.nodeTimeout || !ro.ContextTimeoutEnabled {
				t.Fatalf("retries %d, dial timeout %v, context timeouts %v: not lockclient's", ro.MaxRetries, ro.DialTimeout, ro.ContextTimeoutEnabled)
			}
		})
	}
	if _, err := Dial([]string{"127.0.0.1:6379", "redis://u:d3fault@h:1/x"}, nil); err == nil ||
		!strings.Contains(err.Error(), "Redis address 2 (redis://u:xxxxx@h:1/x)") {
		t.Fatalf("Dial with a bad second address: %v", err)
	}
	for _, addr := range []string{"127.0.0.1:6379", "redis://u:d3fault@h:1"} {
		_, err := Dial([]string{"rediss://h:1", addr}, nil, WithRedisTLS(&tls.Config{}))
		if err == nil || !strings.Contains(err.Error(), "Redis address 2") || !strings.Contains(err.Error(), "use rediss://") ||
			strings.Contains(err.Error(), "d3fault") {
			t.Fatalf("Dial with WithRedisTLS and the plain address %s: %v", redactAddr(addr), err)
		}
	}
}

// TestDialPassword: Dial with a URL reaches a redis-server that needs a
// password (the default user, the password with characters a URL escapes)
// and one ACL user, and the lock works; a wrong password, or a key the ACL
// does not allow, fails at once with its own words, and no error or log
// line carries a password.
func TestDialPassword(t *testing.T) {
	addr := startAuthRedis(t)
	log, logs := captureLog(t)
	defaultURL := "redis://:" + strings.NewReplacer("%", "%25", "/", "%2F", "@", "%40", ":", "%3A").Replace(testDefaultPassword) + "@" + addr
	aclURL := "redis://" + testACLUser + ":" + testACLPassword + "@" + addr + "/0"
	for _, u := range []string{defaultURL, aclURL} {
		c, err := Dial([]string{u}, nil, WithKeyPrefix("lock:"), WithLogger(log))
		if err != nil {
			t.Fatalf("Dial(%s): %v", redactAddr(u), err)
		}
		l, err := c.Acquire(ctxT(t), "pw")
		if err != nil {
			t.Fatalf("Acquire through %s: %v", redactAddr(u), err)
		}
		if err := l.Release(ctxT(t)); err != nil {
			t.Fatalf("Release: %v", err)
		}
		c.Close()
	}

	var delays int
	counting := WithRetry(retryFunc(func(int) (time.Duration, bool) { delays++; return time.Millisecond, true }))
	for _, tc := range []struct {
		name, url, prefix string
		kind              NodeErrorKind
		words             string
	}{
		{"wrong password", "redis://:wr0ng-d3fault@" + addr, "lock:", NodeAuthFailed, "authentication failed"},
		{"wrong ACL password", "redis://" + testACLUser + ":nots3cret@" + addr, "lock:", NodeAuthFailed, "authentication failed"},
		{"no password", "redis://" + addr, "lock:", NodeAuthFailed, "authentication failed"},
		{"key outside the ACL", aclURL, "other:", NodeNotPermitted, "not permitted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delays = 0
			// A node timeout far above any answer time: on a busy machine the
			// default 100ms can pass before the refusal arrives, and an
			// unanswered node is rightly retried.
			c, err := Dial([]string{tc.url}, nil, WithKeyPrefix(tc.prefix), WithLogger(log), counting,
				WithNodeTimeout(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Acquire(context.Background(), "pw")
			if !errors.Is(err, tc.kind) || !errors.Is(err, ErrNotAcquired) {
				t.Fatalf("Acquire: %v, want ErrNotAcquired and %v", err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("error %q does not say %q", err, tc.words)
			}
			if delays != 0 {
				t.Fatalf("Acquire retried %d times a failure no retry can mend", delays)
			}
			mustNotContainSecret(t, "error", err.Error())
			t.Logf("%s: %v", tc.name, err)
		})
	}
	mustNotContainSecret(t, "log", logs.String())
}

// TestDialDatabase: redis://host:port/N puts the lock keys in database N.
func TestDialDatabase(t *testing.T) {
	s := testutil.StartRedis(t)
	c, err := Dial([]string{"redis://" + s.Addr() + "/3"}, nil, WithKeyPrefix("lock:"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l := mustAcquire(t, c, "db")
	defer l.Release(context.Background())
	for db, want := range map[int]string{0: "", 3: l.value} {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), DB: db})
		v, err := rdb.Get(ctxT(t), "lock:db").Result()
		rdb.Close()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if v != want {
			t.Fatalf("database %d holds %q, want %q", db, v, want)
		}
	}
}

// testPKI is a certificate authority made for one test, with a server
// certificate for 127.0.0.1 and a client certificate.
type testPKI struct {
	dir                       string
	caFile                    string
	certFile, keyFile         string
	pool                      *x509.CertPool
	client                    tls.Certificate
	otherPool                 *x509.CertPool // an authority that signed nothing here
	clientCert, clientKeyFile string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{dir: dir}
	ca, caKey := makeCert(t, nil, nil, "fencegate test CA", true)
	p.caFile = writePEM(t, dir, "ca.crt", "CERTIFICATE", ca.Raw)
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	srv, srvKey := makeCert(t, ca, caKey, "127.0.0.1", false)
	p.certFile = writePEM(t, dir, "server.crt", "CERTIFICATE", srv.Raw)
	p.keyFile = writeKey(t, dir, "server.key", srvKey)
	cli, cliKey := makeCert(t, ca, caKey, "lock client", false)
	p.clientCert = writePEM(t, dir, "client.crt", "CERTIFICATE", cli.Raw)
	p.clientKeyFile = writeKey(t, dir, "client.key", cliKey)
	var err error
	if p.client, err = tls.LoadX509KeyPair(p.clientCert, p.clientKeyFile); err != nil {
		t.Fatal(err)
	}
	other, _ := makeCert(t, nil, nil, "another CA", true)
	p.otherPool = x509.NewCertPool()
	p.otherPool.AddCert(other)
	return p
}

func makeCert(t *testing.T, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, cn string, isCA bool) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, parentKey = tmpl, key
	} else if ip := net.ParseIP(cn); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeKey(t *testing.T, dir, name string, key *ecdsa.PrivateKey) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, name, "PRIVATE KEY", der)
}

// TestDialTLS: rediss:// reaches a redis-server that speaks only TLS on
// --tls-port and asks for client certificates, with the password of its
// default user; the lock works. A server certificate from an unknown
// authority and a missing client certificate fail as "authentication
// failed"; TLS to a plain port and plain TCP to the TLS port (the server
// waits for a line, or hangs up) as "unreachable"; none with a password in
// the error or the log.
func TestDialTLS(t *testing.T) {
	pki := newTestPKI(t)
	tlsAddr := startRedisProc(t, func(port int) []string {
		return []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", pki.certFile,
			"--tls-key-file", pki.keyFile, "--tls-ca-cert-file", pki.caFile, "--tls-auth-clients", "yes",
			"--requirepass", testDefaultPassword}
	}, func(addr string) error {
		return pingWith(&redis.Options{Addr: addr, Password: testDefaultPassword, MaxRetries: -1,
			TLSConfig: &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}, ServerName: "127.0.0.1"}})
	})
	log, logs := captureLog(t)
	pw := strings.NewReplacer("%", "%25", "/", "%2F", "@", "%40", ":", "%3A").Replace(testDefaultPassword)
	url := "rediss://:" + pw + "@" + tlsAddr
	good := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.client}}

	c, err := Dial([]string{url}, nil, WithRedisTLS(good), WithKeyPrefix("lock:"), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctxT(t), "tls")
	if err != nil {
		t.Fatalf("Acquire over TLS: %v", err)
	}
	if err := l.Release(ctxT(t)); err != nil {
		t.Fatalf("Release over TLS: %v", err)
	}
	c.Close()
	if good.ServerName != "" {
		t.Fatal("Dial changed the caller's tls.Config")
	}

	plain := testutil.StartRedis(t)
	for _, tc := range []struct {
		name  string
		url   string
		cfg   *tls.Config
		kind  NodeErrorKind
		words string
	}{
		{"server certificate of an unknown authority", url, &tls.Config{RootCAs: pki.otherPool, Certificates: []tls.Certificate{pki.client}}, NodeAuthFailed, "authentication failed"},
		{"no client certificate", url, &tls.Config{RootCAs: pki.pool}, NodeAuthFailed, "authentication failed"},
		{"TLS to a plain port", "rediss://:" + pw + "@" + plain.Addr(), good, NodeUnreachable, "unreachable"},
		{"plain to the TLS port", "redis://:" + pw + "@" + tlsAddr, nil, NodeUnreachable, "unreachable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial([]string{tc.url}, nil, WithRedisTLS(tc.cfg), WithKeyPrefix("lock:"), WithLogger(log),
				WithNodeTimeout(500*time.Millisecond), WithRetry(NoRetry()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Acquire(context.Background(), "tls")
			// Under TLS 1.3 a server that wants a client certificate refuses it
			// after the client's Finished; on a loaded machine the client's
			// first write sometimes meets the reset before it reads the alert,
			// and the refusal looks like a network failure. Ask again then
			// (the product gap is known: such a reset is not yet told apart).
			for try := 0; try < 5 && tc.kind == NodeAuthFailed && errors.Is(err, syscall.ECONNRESET); try++ {
				_, err = c.Acquire(context.Background(), "tls")
			}
			t.Logf("%s: %v", tc.name, err)
			if !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("Acquire: %v, want %v (%q)", err, tc.kind, tc.words)
			}
			mustNotContainSecret(t, "error", err.Error())
		})
	}
	mustNotContainSecret(t, "log", logs.String())
}

// TestNodeErrorWords: each way a node can fail to grant a lock has its own
// words and kind, and Acquire (with a context without deadline) waits only
// for what can change: a lock held elsewhere until it is free, nodes that
// cannot be reached for WithMaxUnreachable, a node that answers wrongly
// not at all.
func TestNodeErrorWords(t *testing.T) {
	held := sharedRedis(t)
	holder := mustAcquire(t, held.client(t, nil, WithTTL(30*time.Second)), "words")
	defer holder.Release(context.Background())

	primary := testutil.StartRedis(t)
	replica := testutil.StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
	httpAddr := testutil.Serve(t, func(c net.Conn) {
		defer c.Close()
		c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
		c.Read(make([]byte, 1024))
	})
	for _, tc := range []struct {
		name    string
		url     string
		prefix  string
		kind    NodeErrorKind // 0: refused, not a node error
		words   string
		retries bool // Acquire retried before giving up
	}{
		{"held by another client", "redis://" + held.addr, held.prefix, 0, "refused (held by another client)", true},
		{"down", "redis://" + testutil.ClosedAddr(t), "lock:", NodeUnreachable, "unreachable", true},
		{"read-only replica", "redis://" + replica.Addr(), "lock:", NodeBadAnswer, "bad answer: READONLY", false},
		{"an HTTP server", "redis://" + httpAddr, "lock:", NodeBadAnswer, "bad answer", false},
		{"TLS to an HTTP server", "rediss://" + httpAddr, "lock:", NodeBadAnswer, "bad answer", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delays := 0
			ctx := context.Background()
			if tc.kind == 0 {
				// The only wait without a bound of its own: the caller's.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			// Not t.Log: go-redis may log a dial that outlived the test.
			log, _ := captureLog(t)
			c, err := Dial([]string{tc.url}, nil, WithKeyPrefix(tc.prefix), WithLogger(log),
				WithMaxUnreachable(300*time.Millisecond), WithNodeTimeout(time.Second),
				WithRetry(retryFunc(func(int) (time.Duration, bool) { delays++; return 10 * time.Millisecond, true })))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Acquire(ctx, "words")
			t.Logf("%v (after %d retries)", err, delays)
			if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("Acquire: %v, want ErrNotAcquired saying %q", err, tc.words)
			}
			if tc.kind != 0 && !errors.Is(err, tc.kind) {
				t.Fatalf("Acquire: %v, want %v", err, tc.kind)
			}
			for _, k := range []NodeErrorKind{NodeUnreachable, NodeAuthFailed, NodeNotPermitted, NodeBadAnswer} {
				if k != tc.kind && errors.Is(err, k) {
					t.Fatalf("Acquire: %v also matches %v", err, k)
				}
			}
			if got := delays > 0; got != tc.retries {
				t.Fatalf("Acquire retried %d times; want retries: %v", delays, tc.retries)
			}
		})
	}
}

// redisStderrChild takes locks on Redis servers that cannot grant them (the
// addresses come from the parent) and prints the errors on stdout; the
// parent checks that nothing reached stderr. With FG_RAW=1 it builds its
// go-redis clients itself (New), without Dial's logger, to show what
// go-redis prints then.
func redisStderrChild() int {
	ctx := context.Background()
	for _, addr := range strings.Split(os.Getenv("FG_ADDRS"), ",") {
		var (
			c   *Client
			err error
		)
		if os.Getenv("FG_RAW") == "1" {
			ro, perr := redis.ParseURL(addr)
			if perr != nil {
				fmt.Println("ERROR", perr)
				return 1
			}
			ro.MaxRetries, ro.DialerRetries = -1, 1
			c, err = New([]redis.UniversalClient{redis.NewClient(ro)}, nil, WithRetry(NoRetry()))
		} else {
			c, err = Dial([]string{addr}, nil, WithMaxUnreachable(0))
		}
		if err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
		_, err = c.Acquire(ctx, "stderr")
		fmt.Println("ACQUIRE", err)
		c.Close()
	}
	return 0
}

// TestNoRedisLogOnStderr: a program that takes a lock on a Redis that is
// down, or that rejects its password, gets the error and nothing on
// stderr: go-redis's own log lines (which it prints there by default, as
// the raw run shows) go to the client's logger at debug level.
func TestNoRedisLogOnStderr(t *testing.T) {
	auth := startAuthRedis(t)
	down := testutil.ClosedAddr(t)
	addrs := "redis://" + down + ",redis://:wr0ng-d3fault@" + auth
	run := func(raw bool) (stdout, stderr string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=redis-stderr", "FG_ADDRS="+addrs, "FG_RAW="+map[bool]string{true: "1"}[raw])
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("child: %v\nstdout: %s\nstderr: %s", err, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	rawOut, rawErr := run(true)
	t.Logf("without Dial's logger, stderr:\n%s", rawErr)
	if !strings.Contains(rawErr, "redis: ") {
		t.Fatalf("go-redis printed nothing on stderr by itself (stdout %q): this test would not see a leak", rawOut)
	}
	out, errOut := run(false)
	t.Logf("with Dial, stdout:\n%s", out)
	if errOut != "" {
		t.Fatalf("stderr is not empty:\n%s", errOut)
	}
	if !strings.Contains(out, "unreachable") || !strings.Contains(out, "authentication failed") {
		t.Fatalf("errors do not say unreachable and authentication failed:\n%s", out)
	}
	mustNotContainSecret(t, "child output", out)
}

// TestUnreachableBound: with every node unreachable and a context without
// deadline, Acquire returns within WithMaxUnreachable, counted from the
// start of the first attempt that found too few nodes: it does not sleep
// past the bound to find out again. Before, it returned one retry delay or
// more after it (seen: 600 ms for a 500 ms bound; 2.45 s for the default
// 2 s).
//
// With instant refusals the attempts start at 0, 200 and 400 ms and the call
// ends after the third (the fourth would start past 500 ms); the old code
// slept to 600 ms or later. Timers never fire early, so a call that sleeps
// past the bound takes at least bound+delay/2; the margin up to it absorbs a
// loaded machine's slow attempts (seen: 501 ms under -race at load 4).
func TestUnreachableBound(t *testing.T) {
	const bound, delay = 500 * time.Millisecond, 200 * time.Millisecond
	log, _ := captureLog(t)
	c, err := Dial([]string{"redis://" + testutil.ClosedAddr(t)}, nil, WithLogger(log), WithMaxUnreachable(bound),
		WithRetry(FixedRetry(delay)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Acquire(context.Background(), "bound")
	took := time.Since(start)
	t.Logf("%v after %v", err, took)
	if !errors.Is(err, NodeUnreachable) || !strings.Contains(err.Error(), "too few Redis nodes reachable") {
		t.Fatalf("Acquire: %v; want too few nodes reachable", err)
	}
	if took >= bound+delay/2 {
		t.Fatalf("Acquire returned after %v; the bound is %v and a retry %v: it slept past the bound", took, bound, delay)
	}
}
