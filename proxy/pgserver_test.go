package proxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/pgfence"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// testCA is a throwaway certificate authority with one leaf certificate
// for 127.0.0.1 and localhost.
type testCA struct {
	caFile, certFile, keyFile string
	pool                      *x509.CertPool
	leaf                      tls.Certificate
}

func newTestCA(t *testing.T, dir string) *testCA {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fencegate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	c := &testCA{caFile: filepath.Join(dir, "ca.pem"), certFile: filepath.Join(dir, "server.crt"), keyFile: filepath.Join(dir, "server.key")}
	write := func(f, typ string, der []byte) {
		if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(c.caFile, "CERTIFICATE", caDER)
	write(c.certFile, "CERTIFICATE", der)
	write(c.keyFile, "EC PRIVATE KEY", keyDER)
	c.pool = x509.NewCertPool()
	c.pool.AddCert(ca)
	c.leaf, err = tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// pgServer is a throwaway PostgreSQL cluster run as user postgres, with
// SCRAM-SHA-256 password authentication on 127.0.0.1 and optionally TLS.
type pgServer struct {
	t           *testing.T
	dir         string // owned by postgres
	port        int
	password    string // of the superuser postgres
	appPassword string // of the application role made by appRole
	cmd         *exec.Cmd
	cred        *syscall.Credential
	bin         string // initdb and postgres of the major under test
}

func startPGServer(t *testing.T, ca *testCA) *pgServer {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		t.Fatalf("look up user postgres: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp("", "fencegate-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	s := &pgServer{t: t, dir: dir, port: testutil.FreePort(t), password: "s3cret-" + testutil.RandomName(""),
		cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, bin: testutil.PostgresBinDir(t)}
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte(s.password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{dir, pw} {
		if err := os.Chown(f, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(s.bin, "initdb"), "-D", data, "-U", "postgres", "--pwfile", pw,
		"--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\npassword_encryption = 'scram-sha-256'\nfsync = off\n", s.port, dir)
	if ca != nil {
		for _, f := range []string{ca.certFile, ca.keyFile} {
			b, _ := os.ReadFile(f)
			dst := filepath.Join(data, filepath.Base(f))
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
			_ = os.Chown(dst, uid, gid)
		}
		conf += "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
	}
	if err := os.WriteFile(filepath.Join(data, "postgresql.auto.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(filepath.Join(data, "postgresql.auto.conf"), uid, gid)
	hba := "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = os.Chown(filepath.Join(data, "pg_hba.conf"), uid, gid)
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// DSN returns a DSN with the password for database postgres.
func (s *pgServer) DSN(sslmode string) string {
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=%s", s.password, s.port, sslmode)
}

// appRole creates an application role with a password in database
// postgres, installs the fencegate schema there with the role's grants, and
// returns the role's DSN (sslmode=disable).
func (s *pgServer) appRole(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, s.DSN("disable"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s.appPassword = "app-" + testutil.RandomName("")
	if _, err := c.Exec(ctx, "CREATE ROLE app LOGIN PASSWORD '"+s.appPassword+"'"); err != nil {
		t.Fatal(err)
	}
	if _, err := pgfence.Install(ctx, c, pgfence.InstallOptions{Grant: []string{"app"}}); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/postgres?sslmode=disable", s.appPassword, s.port)
}

// Start starts the server and waits until it accepts connections.
func (s *pgServer) Start() {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start postgres: %v", err)
	}
	s.cmd = cmd
	testutil.WaitFor(s.t, 30*time.Second, "throwaway postgres", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgconn.Connect(ctx, s.DSN("disable"))
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
}

// Stop shuts the server down (fast mode) and waits for it.
func (s *pgServer) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}
