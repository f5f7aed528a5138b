package main

import (
	"bytes"
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
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

// TestProxyLogsNoPassword runs "fencegate proxy" with passwords in both
// upstream addresses, lets it log everything it logs (startup, the
// ignored credentials, a schema install through the admin connection, a
// refused session, shutdown) and looks for the passwords in every line.
func TestProxyLogsNoPassword(t *testing.T) {
	const upSecret, adminSecret = "UpStr3amSecret", "Adm1nSecret"
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
	listen := testutil.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"proxy", "--listen", listen,
			"--upstream", "postgres://app:" + upSecret + "@" + u.Host + "?sslmode=disable",
			"--admin-upstream", admin.String(), "--drain-timeout", "1s"}, &out, &errb)
	}()
	appDSN := strings.Replace(db.AppDSN, u.Host, listen, 1)
	testutil.WaitFor(t, 20*time.Second, "the proxy to admit the application role", func() error {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		c, err := pgx.Connect(cctx, appDSN)
		if err != nil {
			return err
		}
		return c.Close(cctx)
	})
	_, err = pgx.Connect(ctx, strings.Replace(db.DSN, u.Host, listen, 1))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != fencegate.CodePrivilegedRole {
		t.Errorf("superuser through the proxy: %v, want SQLSTATE %s", err, fencegate.CodePrivilegedRole)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d", code)
	}
	logs := out.String() + errb.String()
	for _, want := range []string{"fencegate proxy listening on " + listen, "repaired through the admin connection", "session refused", "are not used"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the logs lack %q:\n%s", want, logs)
		}
	}
	for _, secret := range []string{upSecret, adminSecret} {
		if strings.Contains(logs, secret) {
			t.Fatalf("a password in the logs:\n%s", logs)
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
