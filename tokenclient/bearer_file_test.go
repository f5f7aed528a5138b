package tokenclient_test

import (
	"bufio"
	"crypto/tls"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/internal/testutil"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// The commands docs/operations.md gives for Prometheus's bearer file, run
// as written against a credential made by 'fencegate token credential',
// give a file (mode 0600) whose content, sent as Prometheus sends it,
// opens /metrics of a TLS node; the credential file itself does not.
func TestPrometheusBearerFileFromDocs(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..")
	var convert string
	f, err := os.Open(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := sc.Text(); strings.Contains(l, "> fencegate-token.bearer") {
			convert = l
		}
	}
	f.Close()
	if convert == "" {
		t.Fatal("docs/operations.md shows no command that writes fencegate-token.bearer")
	}

	dir := t.TempDir()
	bin := testutil.Binary(t) // skips under -short before it builds
	cmd := exec.Command(bin, "token", "credential", "--name", "prometheus", "--role", "client", "--out", "prometheus.credential")
	cmd.Dir = dir
	nodeLine, err := cmd.Output()
	if err != nil {
		t.Fatalf("token credential: %v", err)
	}
	sh := exec.Command("sh", "-c", convert)
	sh.Dir = dir
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", convert, err, out)
	}
	bearerPath := filepath.Join(dir, "fencegate-token.bearer")
	st, err := os.Stat(bearerPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v; want 0600 (it holds the secret)", bearerPath, st.Mode().Perm())
	}
	bearer, _ := os.ReadFile(bearerPath)
	credFile, _ := os.ReadFile(filepath.Join(dir, "prometheus.credential"))

	creds, err := tokenservice.ParseCredentials(strings.NewReader(string(nodeLine)), "credentials")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("cluster", pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := tokenservicetest.StartCluster(t, 1, tokenservicetest.WithCA(ca, creds))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer hc.CloseIdleConnections()
	scrape := func(credentials string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, c.APIURL(0)+"/metrics", nil)
		// Prometheus reads credentials_file and trims surrounding space.
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(credentials))
		resp, err := hc.Do(req)
		if err != nil {
			t.Logf("GET /metrics: %v", err) // a header Go refuses to send: Prometheus's scrape fails too
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := scrape(string(bearer)); code != http.StatusOK {
		t.Fatalf("GET /metrics with the bearer file %s made by the documented command: HTTP %d; want 200", bearerPath, code)
	}
	if code := scrape(string(credFile)); code == http.StatusOK {
		t.Fatal("the credential file as written by token credential opened /metrics: the conversion would be needless")
	}
}

// TestMain removes the binary testutil.Binary built.
func TestMain(m *testing.M) { testutil.Main(m) }
