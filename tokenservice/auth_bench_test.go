package tokenservice

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
)

// BenchmarkIdentify measures what authentication adds to each request:
// reading the roles of a verified client certificate, or checking a bearer
// credential (SHA-256 of the secret, constant-time compare) in a file of
// 1,000 credentials.
func BenchmarkIdentify(b *testing.B) {
	var lines []string
	var cred tokenclient.ClientCredential
	for i := range 1000 {
		c, err := tokenclient.NewClientCredential(fmt.Sprintf("app%d", i))
		if err != nil {
			b.Fatal(err)
		}
		lines = append(lines, c.ServerLine(tokenapi.RoleClient))
		cred = c
	}
	creds, err := ParseCredentials(strings.NewReader(strings.Join(lines, "\n")), "bench")
	if err != nil {
		b.Fatal(err)
	}
	a := &authenticator{creds: creds}
	ca, err := pki.NewCA("bench", pki.Options{})
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := ca.Issue("app", []string{string(tokenapi.RoleClient)}, nil, pki.Options{})
	if err != nil {
		b.Fatal(err)
	}
	certReq, _ := http.NewRequest("POST", "/v1/tokens", nil)
	certReq.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{leaf.Cert}}}
	bearerReq, _ := http.NewRequest("POST", "/v1/tokens", nil)
	bearerReq.TLS = &tls.ConnectionState{}
	bearerReq.Header.Set("Authorization", "Bearer "+cred.Name+":"+cred.Secret)
	for _, bc := range []struct {
		name string
		req  *http.Request
	}{{"certificate", certReq}, {"bearer", bearerReq}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, why, ok := a.identify(bc.req); !ok {
					b.Fatal(why)
				}
			}
		})
	}
}
