package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence/pgfencetest"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestProxyCommandLine(t *testing.T) {
	const secret = "Sup3rSecretPW"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"proxy", "--help"}, 0, "allow-privileged-roles"},
		{[]string{"proxy", "--help"}, 0, "admin-upstream"},
		{[]string{"proxy", "--allow-unfenced-writes"}, 2, "flag provided but not defined"},
		{[]string{"proxy", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"proxy", "extra"}, 2, "unexpected argument"},
		{[]string{"proxy", "--tls-cert", "c.pem"}, 2, "--tls-cert and --tls-key go together"},
		{[]string{"proxy", "--require-client-tls"}, 2, "needs --tls-cert"},
		{[]string{"proxy", "--upstream", "mysql://x:1"}, 2, "scheme must be postgres://"},
		{[]string{"proxy", "--upstream", "mysql://u:" + secret + "@x:1"}, 2, "scheme must be postgres://"},
		{[]string{"proxy", "--upstream", "host=x password=" + secret}, 2, "want postgres://host:port"},
		{[]string{"proxy", "--upstream", "postgres://127.0.0.1:5432?sslmode=maybe"}, 2, "unknown sslmode"},
		{[]string{"proxy", "--upstream", "postgres://u:" + secret + "@127.0.0.1:5432?sslmode=maybe"}, 2, "unknown sslmode"},
		{[]string{"proxy", "--upstream", "postgres://u:" + secret + "@127.0.0.1:5432", "--upstream-ca", "ca.pem", "--upstream-sslmode", "verify-full"}, 2, "no such file"},
		{[]string{"proxy", "--admin-upstream", "postgres://u:" + secret + "@127.0.0.1:notaport/x"}, 2, "admin connection string does not parse"},
		{[]string{"proxy", "--admin-upstream", "host=127.0.0.1 port=x password=" + secret}, 2, "admin connection string does not parse"},
		{[]string{"proxy", "--health-upstream", "postgres://u:" + secret + "@127.0.0.1:notaport/x"}, 2, "health connection string does not parse"},
		{[]string{"proxy", "--health-upstream", "user=u password='" + secret}, 2, "health connection string does not parse"},
		{[]string{"proxy", "--help"}, 0, "/readyz"},
		{[]string{"proxy", "--help"}, 0, "health-upstream"},
		{[]string{"proxy", "--help"}, 0, "idle-in-transaction-timeout"},
		{[]string{"proxy", "--idle-in-transaction-timeout", "soon"}, 2, "invalid value"},
		{[]string{"proxy", "--help"}, 0, "prune-older-than"},
		{[]string{"proxy", "--prune-older-than", "720h"}, 2, "--prune-older-than needs --admin-upstream"},
		{[]string{"proxy", "--reap-db", "postgres://r:" + secret + "@/db"}, 2, "needs a positive --reap-after"},
		{[]string{"proxy", "--reap-db", "host=x port=y password=" + secret, "--reap-after", "1m"}, 2, "reaper's connection string does not parse"},
		{[]string{"proxy", "--prune-older-than", "720h", "--admin-upstream", "postgres://postgres@127.0.0.1:5432/postgres"}, 2, "--prune-older-than needs --token-servers"},
		{[]string{"proxy", "--token-servers", "http://127.0.0.1:1"}, 2, "--token-servers is used only with --prune-older-than"},
		{[]string{"proxy", "--prune-older-than", "720h", "--admin-upstream", "postgres://postgres@127.0.0.1:5432/postgres", "--token-servers", "http://127.0.0.1:1", "--token-tls-cert", "c.pem"}, 2, "--token-tls-cert and --token-tls-key go together"},
		{[]string{"proxy", "--prune-older-than", "-1h", "--admin-upstream", "postgres://postgres@127.0.0.1:5432/postgres", "--token-servers", "http://127.0.0.1:1"}, 2, "negative"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errb)
		all := errb.String() + out.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("fencegate %v: exit %d, want %d with %q; stderr:\n%s", tc.args, code, tc.code, tc.want, errb.String())
		}
		if strings.Contains(all, secret) {
			t.Errorf("fencegate %v printed the password:\n%s", tc.args, all)
		}
	}
}

// lockedBuffer is a bytes.Buffer for writers in several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startProxyCommand runs "fencegate proxy" with args (and --listen,
// --metrics-addr) until the test ends, and returns its listen and HTTP
// addresses, its output so far, and a stop function that ends it and
// returns its exit code.
func startProxyCommand(t *testing.T, args ...string) (listen, web string, out *lockedBuffer, stop func() int) {
	t.Helper()
	listen, web = testutil.FreeAddr(t), testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	out = &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"proxy", "--listen", listen, "--metrics-addr", web,
			"--health-interval", "50ms", "--drain-timeout", "1s"}, args...), out, out)
	}()
	var once sync.Once
	code := 0
	stop = func() int {
		once.Do(func() { cancel(); code = <-done })
		return code
	}
	t.Cleanup(func() { stop() })
	return listen, web, out, stop
}

// httpGet returns the status and body of GET url ("" and 0 when it does
// not answer).
func httpGet(url string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connectErr connects to dsn and returns the error (nil: admitted).
func connectErr(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

// TestProxyLogsNoPassword runs "fencegate proxy" with a password in each
// of its three connection strings (--upstream, --admin-upstream,
// --health-upstream), lets it do everything it logs (startup, the ignored
// credentials, a schema install through the admin connection, a refused
// session, health checks, shutdown), and looks for the passwords in every
// line it printed, every error a client got and every answer of its HTTP
// server.
func TestProxyLogsNoPassword(t *testing.T) {
	const upSecret, adminSecret, healthSecret = "UpStr3amSecret", "Adm1nSecret", "He4lthSecret"
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	// An empty schema owned by the test's owner role: the repair keeps that
	// owner rather than create the fixed-name default role
	// (pgfence.DefaultOwnerRole), which would outlive the test on a shared
	// server.
	db.Exec(t, "CREATE SCHEMA fencegate AUTHORIZATION "+db.Owner)
	admin := *u
	admin.User = url.UserPassword(u.User.Username(), adminSecret) // trust authentication ignores it
	health := *u
	health.User = url.UserPassword(db.App, healthSecret)
	listen, web, out, stop := startProxyCommand(t,
		"--upstream", "postgres://app:"+upSecret+"@"+u.Host+"?sslmode=disable",
		"--admin-upstream", admin.String(), "--health-upstream", health.String())
	var seen []string // what clients and the HTTP server said
	appDSN := strings.Replace(db.AppDSN, u.Host, listen, 1)
	testutil.WaitFor(t, 20*time.Second, "the proxy to admit the application role", func() error { return connectErr(appDSN) })
	err = connectErr(strings.Replace(db.DSN, u.Host, listen, 1))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != fencegate.CodePrivilegedRole {
		t.Errorf("superuser through the proxy: %v, want SQLSTATE %s", err, fencegate.CodePrivilegedRole)
	}
	seen = append(seen, fmt.Sprintf("%v %#v", err, pe))
	testutil.Eventually(t, 20*time.Second, "/readyz to answer 200", func() bool {
		code, body := httpGet("http://" + web + "/readyz")
		seen = append(seen, body)
		return code == http.StatusOK
	})
	for _, path := range []string{"/metrics", "/healthz"} {
		code, body := httpGet("http://" + web + path)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d", path, code)
		}
		seen = append(seen, body)
	}
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	logs := out.String()
	for _, want := range []string{"fencegate proxy listening on " + listen, "repaired through the admin connection",
		"session refused", "are not used", "health_upstream=\"user=" + db.App} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q:\n%s", want, logs)
		}
	}
	all := logs + strings.Join(seen, "\n")
	for _, secret := range []string{upSecret, adminSecret, healthSecret} {
		if strings.Contains(all, secret) {
			t.Fatalf("a password in the proxy's output:\n%s", all)
		}
	}
}

// TestProxyFailuresShowNoPassword: the same with connection strings that
// fail: an admin role and a health role that do not exist. The session
// refused for the failed repair, /readyz's 503 and every log line say
// what failed, naming the role, never the password.
func TestProxyFailuresShowNoPassword(t *testing.T) {
	const upSecret, adminSecret, healthSecret = "UpStr3amSecretTwo", "Adm1nSecretTwo", "He4lthSecretTwo"
	db := pgfencetest.New(t, pgfencetest.Options{NoInstall: true})
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	admin := *u
	admin.User = url.UserPassword("no_such_admin", adminSecret)
	health := *u
	health.User = url.UserPassword("no_such_health", healthSecret)
	listen, web, out, stop := startProxyCommand(t,
		"--upstream", "postgres://app:"+upSecret+"@"+u.Host+"?sslmode=disable",
		"--admin-upstream", admin.String(), "--health-upstream", "password="+healthSecret+" user=no_such_health dbname="+health.Path[1:])
	var seen []string
	appDSN := strings.Replace(db.AppDSN, u.Host, listen, 1)
	var pe *pgconn.PgError
	testutil.WaitFor(t, 20*time.Second, "the proxy to refuse the session", func() error {
		err := connectErr(appDSN)
		if errors.As(err, &pe) && pe.Code == fencegate.CodeSchemaInvalid {
			return nil
		}
		return fmt.Errorf("connect: %v, want SQLSTATE %s", err, fencegate.CodeSchemaInvalid)
	})
	if !strings.Contains(pe.Message, "no_such_admin") {
		t.Errorf("the refusal does not name the admin role: %s", pe.Message)
	}
	seen = append(seen, fmt.Sprintf("%#v", pe))
	testutil.Eventually(t, 20*time.Second, "/readyz to say the health role cannot log in", func() bool {
		code, body := httpGet("http://" + web + "/readyz")
		seen = append(seen, body)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "cannot log in as the health role (user=no_such_health")
	})
	_, body := httpGet("http://" + web + "/metrics")
	seen = append(seen, body)
	if code := stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	logs := out.String()
	for _, want := range []string{"--admin-upstream connection does not work", "could not repair", "upstream check failed"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q:\n%s", want, logs)
		}
	}
	all := logs + strings.Join(seen, "\n")
	for _, secret := range []string{upSecret, adminSecret, healthSecret} {
		if strings.Contains(all, secret) {
			t.Fatalf("a password in the proxy's output:\n%s", all)
		}
	}
}

// An admin connection that does not work is reported at startup, without
// its password.
func TestProxyWarnsOfABrokenAdminConnection(t *testing.T) {
	const secret = "Adm1nSecretTwo"
	listen := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"proxy", "--listen", listen,
			"--admin-upstream", "postgres://admin:" + secret + "@" + testutil.FreeAddr(t) + "/postgres?sslmode=disable"}, &out, &errb)
	}()
	testutil.Eventually(t, 20*time.Second, "the warning", func() bool {
		return strings.Contains(errb.String(), "--admin-upstream connection does not work")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	if logs := out.String() + errb.String(); strings.Contains(logs, secret) {
		t.Fatalf("the admin password in the logs:\n%s", logs)
	}
}

// With --drain-delay, the first signal makes /readyz answer 503 while the
// proxy still admits sessions (load balancers turn away first); a second
// signal ends the delay, and the proxy drains and exits.
func TestProxyDrainDelay(t *testing.T) {
	db := pgfencetest.New(t)
	u, err := url.Parse(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	listen, web, out, stop := startProxyCommand(t, "--upstream", "postgres://"+u.Host+"?sslmode=disable", "--drain-delay", "1h")
	appDSN := strings.Replace(db.AppDSN, u.Host, listen, 1)
	testutil.WaitFor(t, 20*time.Second, "the proxy to admit the application role", func() error { return connectErr(appDSN) })
	testutil.Eventually(t, 20*time.Second, "/readyz to answer 200", func() bool {
		code, _ := httpGet("http://" + web + "/readyz")
		return code == http.StatusOK
	})
	done := make(chan int, 1)
	go func() { done <- stop() }() // the first signal
	testutil.Eventually(t, 20*time.Second, "/readyz to answer 503 draining soon", func() bool {
		code, body := httpGet("http://" + web + "/readyz")
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "draining soon")
	})
	if err := connectErr(appDSN); err != nil {
		t.Fatalf("a session during the drain delay: %v, want it admitted", err)
	}
	if code, _ := httpGet("http://" + web + "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz during the drain delay: %d, want 200", code)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil { // the second signal
		t.Fatal(err)
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "second signal: the drain delay ends now") {
		t.Fatalf("the logs do not say the second signal ended the delay:\n%s", out.String())
	}
}
