package tokenclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/tokenapi"
)

// One rule for resource names: not UTF-8, NUL, U+FFFD or more than
// tokenapi.MaxResource bytes is refused, and the client refuses before any network
// write.
func TestValidateResourceRule(t *testing.T) {
	for _, bad := range []string{"", " ", "a\x00b", "a\xffb", "a\uFFFDb", strings.Repeat("x", tokenapi.MaxResource+1)} {
		if err := tokenapi.ValidateResource(bad); !errors.Is(err, tokenapi.ErrBadRequest) {
			t.Errorf("tokenapi.ValidateResource(%q) = %v; want tokenapi.ErrBadRequest", bad, err)
		}
	}
	for _, good := range []string{"orders/42", strings.Repeat("ü", tokenapi.MaxResource/2), strings.Repeat("x", tokenapi.MaxResource), "a\tb"} {
		if err := tokenapi.ValidateResource(good); err != nil {
			t.Errorf("tokenapi.ValidateResource(%q) = %v", good, err)
		}
	}
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	c, err := NewClient([]string{srv.URL}, WithCoalescing(false))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, bad := range []string{"a\x00b", "a\xffb"} {
		if _, err := c.Next(context.Background(), bad); !errors.Is(err, tokenapi.ErrBadResource) {
			t.Errorf("Next(%q) = %v; want tokenapi.ErrBadResource", bad, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the client sent %d requests for bad resource names", hits.Load())
	}
}

// A client configured for TLS refuses a plain http:// server URL before it
// sends anything: it would take a forged token from whoever answers there.
func TestTLSClientRefusesPlainURL(t *testing.T) {
	var hits atomic.Int32
	forger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"resource":"orders/1","token":9000000000000000000}`))
	}))
	defer forger.Close()
	cfg := ClientTLSConfig(x509.NewCertPool())
	if _, err := NewClient([]string{forger.URL}, WithTLS(cfg)); !errors.Is(err, ErrPlainURL) {
		t.Errorf("NewClient(%s) with WithTLS = %v; want ErrPlainURL", forger.URL, err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	if _, err := NewClient([]string{forger.URL}, WithHTTPClient(hc)); !errors.Is(err, ErrPlainURL) {
		t.Errorf("NewClient(%s) with a TLS transport = %v; want ErrPlainURL", forger.URL, err)
	}
	if hits.Load() != 0 {
		t.Fatalf("the forger got %d requests", hits.Load())
	}
	// HOST:PORT still means https with TLS.
	c, err := NewClient([]string{strings.TrimPrefix(forger.URL, "http://")}, WithTLS(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.Servers(); len(s) != 1 || !strings.HasPrefix(s[0], "https://") {
		t.Fatalf("servers %v; want https", s)
	}
}
