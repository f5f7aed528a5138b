package tokenservice_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/pki"
	"github.com/fencegate/fencegate/tokenapi"
	"github.com/fencegate/fencegate/tokenclient"
	"github.com/fencegate/fencegate/tokenservice"
	"github.com/fencegate/fencegate/tokenservice/tokenservicetest"
)

// caller is one way of calling the API: a TLS configuration (certificate
// or none) and an Authorization header (or none).
type caller struct {
	name  string
	roles []tokenapi.Role // what the node should grant; nil: no identity
	tls   *tls.Config
	auth  string
	// cn is the certificate's name, when it is the one a Self route's path
	// names; member whether it names a member (Member routes).
	cn     string
	member bool
	// refusedAtHandshake: the TLS handshake itself must fail.
	refusedAtHandshake bool
}

func issueTLS(t *testing.T, ca, trust *pki.CA, name string, o pki.Options, roles ...tokenapi.Role) *tls.Config {
	t.Helper()
	rs := make([]string, len(roles))
	for i, r := range roles {
		rs[i] = string(r)
	}
	leaf, err := ca.Issue(name, rs, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	return tokenclient.ClientTLSConfig(trust.Pool(), leaf.TLSCertificate())
}

// Must show: every endpoint refuses unauthenticated and wrong-role
// requests. Each route of the route table is called by each kind of
// caller: no identity gets 401, the wrong role 403 (each naming the role
// the route needs), the right role neither.
func TestEveryRouteRefusesWithoutItsRole(t *testing.T) {
	t.Parallel()
	ca, other := newCA(t, "cluster"), newCA(t, "other")
	creds, bearer := credentials(t, map[string][]tokenapi.Role{
		"app": {tokenapi.RoleClient}, "ops": {tokenapi.RoleAdmin}, "both": {tokenapi.RoleClient, tokenapi.RoleAdmin},
	})
	c := tokenservicetest.StartCluster(t, 3, tokenservicetest.WithCA(ca, creds))
	anon := tokenclient.ClientTLSConfig(ca.Pool())
	expired := pki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)}
	wrongSecret := bearer["app"]
	wrongSecret.Secret = strings.Repeat("A", len(wrongSecret.Secret))
	callers := []caller{
		{name: "nothing", tls: anon},
		{name: "client cert", roles: []tokenapi.Role{tokenapi.RoleClient}, tls: issueTLS(t, ca, ca, "app", pki.Options{}, tokenapi.RoleClient)},
		{name: "admin cert", roles: []tokenapi.Role{tokenapi.RoleAdmin}, tls: issueTLS(t, ca, ca, "ops", pki.Options{}, tokenapi.RoleAdmin)},
		{name: "peer cert", roles: []tokenapi.Role{tokenapi.RolePeer}, tls: issueTLS(t, ca, ca, "n2", pki.Options{}, tokenapi.RolePeer), member: true},
		// A peer certificate named like the path's {id}, of a node that
		// is not a member: its peer role counts only on the questions a
		// node asks before it is a member (state, configuration).
		{name: "peer cert named like the path", roles: []tokenapi.Role{tokenapi.RolePeer}, tls: issueTLS(t, ca, ca, "no-such-member", pki.Options{}, tokenapi.RolePeer), cn: "no-such-member"},
		{name: "cert without role", roles: []tokenapi.Role{}, tls: issueTLS(t, ca, ca, "nobody", pki.Options{})},
		{name: "bearer client", roles: []tokenapi.Role{tokenapi.RoleClient}, tls: anon, auth: "Bearer app:" + bearer["app"].Secret},
		{name: "bearer admin", roles: []tokenapi.Role{tokenapi.RoleAdmin}, tls: anon, auth: "Bearer ops:" + bearer["ops"].Secret},
		{name: "bearer client+admin", roles: []tokenapi.Role{tokenapi.RoleClient, tokenapi.RoleAdmin}, tls: anon, auth: "Bearer both:" + bearer["both"].Secret},
		{name: "bearer wrong secret", tls: anon, auth: "Bearer app:" + wrongSecret.Secret},
		{name: "bearer unknown name", tls: anon, auth: "Bearer eve:" + bearer["app"].Secret},
		{name: "bearer malformed", tls: anon, auth: "Bearer " + bearer["app"].Secret},
		{name: "basic auth", tls: anon, auth: "Basic YXBwOmFwcA=="},
		{name: "client cert with a wrong bearer", tls: issueTLS(t, ca, ca, "app", pki.Options{}, tokenapi.RoleClient), auth: "Bearer app:" + wrongSecret.Secret},
		// Go's TLS client leaves out a certificate the server's CA list
		// does not name: the node sees no identity.
		{name: "admin cert of another CA", tls: issueTLS(t, other, ca, "ops", pki.Options{}, tokenapi.RoleAdmin)},
		// An attacker's client sends it anyway: the handshake fails.
		{name: "admin cert of another CA, forced", tls: forceCert(issueTLS(t, other, ca, "ops", pki.Options{}, tokenapi.RoleAdmin)), refusedAtHandshake: true},
		{name: "expired admin cert", tls: forceCert(issueTLS(t, ca, ca, "ops", expired, tokenapi.RoleAdmin)), refusedAtHandshake: true},
	}
	routes := tokenservice.Routes()
	// The contract: who may call what. Minting is for clients; allocation,
	// the founding questions and a member's own address for nodes;
	// membership, snapshot and restore for admins; reading for clients and
	// admins; metrics and probes for any identity.
	want := map[string][]tokenapi.Role{
		"POST /v1/tokens":                {tokenapi.RoleClient},
		"POST /v1/internal/allocate":     {tokenapi.RolePeer},
		"GET /v1/internal/state":         {tokenapi.RolePeer},
		"GET /v1/internal/view":          {tokenapi.RolePeer},
		"GET /v1/internal/view-stream":   {tokenapi.RolePeer},
		"GET /v1/internal/configuration": {tokenapi.RolePeer},
		"PUT /v1/members/{id}/api-addr":  {tokenapi.RolePeer},
		"GET /v1/status":                 {tokenapi.RoleClient, tokenapi.RoleAdmin},
		"GET /v1/floor":                  {tokenapi.RoleClient, tokenapi.RoleAdmin},
		"GET /v1/members":                {tokenapi.RoleClient, tokenapi.RoleAdmin},
		"POST /v1/members":               {tokenapi.RoleAdmin},
		"DELETE /v1/members/{id}":        {tokenapi.RoleAdmin},
		"GET /v1/snapshot":               {tokenapi.RoleAdmin},
		"POST /v1/restore":               {tokenapi.RoleAdmin},
		"GET /metrics":                   tokenapi.Roles,
		"GET /healthz":                   tokenapi.Roles,
		"GET /readyz":                    tokenapi.Roles,
	}
	wantSelf := map[string]bool{"PUT /v1/members/{id}/api-addr": true}
	wantMember := map[string]bool{"POST /v1/internal/allocate": true}
	if len(routes) != len(want) {
		t.Errorf("Routes() lists %d routes; the contract below names %d", len(routes), len(want))
	}
	for _, rt := range routes {
		key := rt.Method + " " + rt.Path
		if len(rt.Roles) == 0 {
			t.Errorf("%s needs no role: every route must name the roles that may call it", key)
		}
		if w, ok := want[key]; !ok {
			t.Errorf("%s is not in the contract: add it with the roles it needs", key)
		} else if !sameRoles(w, rt.Roles) {
			t.Errorf("%s needs %v; want %v", key, rt.Roles, w)
		}
		if rt.Self != wantSelf[key] || rt.Member != wantMember[key] {
			t.Errorf("%s: Self %v, Member %v; want %v, %v", key, rt.Self, rt.Member, wantSelf[key], wantMember[key])
		}
		if slices.Contains(rt.Roles, tokenapi.RoleClient) && strings.Contains(rt.Path, "members") && rt.Method != http.MethodGet {
			t.Errorf("%s: a client may change membership", key)
		}
		if rt.Doc == "" {
			t.Errorf("%s has no Doc line", key)
		}
	}
	membersBefore := c.Node(0).LocalStatus().Members
	target := c.APIURL(c.Leader(t))
	for _, cl := range callers {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cl.tls}, Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		for _, rt := range routes {
			t.Run(cl.name+"/"+rt.Method+" "+rt.Path, func(t *testing.T) {
				path := strings.ReplaceAll(rt.Path, "{id}", "no-such-member")
				req, err := http.NewRequest(rt.Method, target+path, bytes.NewReader(benignBody(rt)))
				if err != nil {
					t.Fatal(err)
				}
				if cl.auth != "" {
					req.Header.Set("Authorization", cl.auth)
				}
				resp, err := hc.Do(req)
				if cl.refusedAtHandshake {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("answered %s; want the TLS handshake refused", resp.Status)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var e struct{ Error, Code string }
				_ = json.Unmarshal(body, &e)
				allowed := slices.ContainsFunc(rt.Roles, func(r tokenapi.Role) bool { return slices.Contains(cl.roles, r) })
				if rt.Self && cl.cn != "no-such-member" {
					allowed = false // only the member the path names
				}
				if rt.Member && !cl.member {
					allowed = false // only a current member
				}
				if slices.Equal(cl.roles, []tokenapi.Role{tokenapi.RolePeer}) && !cl.member &&
					rt.Path != "/v1/internal/state" && rt.Path != "/v1/internal/configuration" {
					allowed = false // a non-member's certificate is not a peer's
				}
				switch {
				case cl.roles == nil:
					if resp.StatusCode != http.StatusUnauthorized || e.Code != tokenapi.CodeUnauthenticated {
						t.Fatalf("got %s %s; want 401 unauthenticated", resp.Status, body)
					}
				case !allowed:
					if resp.StatusCode != http.StatusForbidden || e.Code != tokenapi.CodeForbidden {
						t.Fatalf("got %s %s; want 403 forbidden", resp.Status, body)
					}
				default:
					if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
						t.Fatalf("got %s %s; the role %v may call this route", resp.Status, body, cl.roles)
					}
					if rt.Self && (resp.StatusCode != http.StatusConflict || !strings.Contains(e.Error, "not a member")) {
						t.Fatalf("got %s %s; want 409: past the Self rule, the member table refuses a non-member", resp.Status, body)
					}
					return
				}
				for _, r := range rt.Roles {
					if !strings.Contains(e.Error, string(r)) {
						t.Errorf("message %q does not name role %s, which the route needs", e.Error, r)
					}
				}
				if strings.Contains(string(body), "leader_api") || strings.Contains(string(body), c.Node(0).RaftAddr()) {
					t.Errorf("a refusal tells the caller about the cluster: %s", body)
				}
				for _, b := range bearer {
					if strings.Contains(string(body), b.Secret) {
						t.Errorf("a refusal echoes a secret: %s", body)
					}
				}
			})
		}
	}
	// A peer certificate of a node that is not (or no longer) a member may
	// not allocate: certificates outlive membership.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: issueTLS(t, ca, ca, "n9", pki.Options{}, tokenapi.RolePeer)}, Timeout: 10 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post(target+"/v1/internal/allocate", "application/json", strings.NewReader(`{"count":1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "member") {
		t.Fatalf("allocate with the peer certificate of non-member n9: %s %s; want 403 naming membership", resp.Status, body)
	}
	// Every call above was harmless: the members and their addresses are
	// as they were.
	// (Who leads may change meanwhile: compare the membership only.)
	if got := c.Node(0).LocalStatus().Members; !slices.EqualFunc(got, membersBefore, sameMember) {
		t.Fatalf("the route table's calls changed the members:\n before %+v\n after  %+v", membersBefore, got)
	}
}

// sameMember reports whether a and b are the same member at the same
// addresses with the same vote, whatever each knows of the leader.
func sameMember(a, b tokenapi.Member) bool {
	return a.ID == b.ID && a.RaftAddr == b.RaftAddr && a.APIAddr == b.APIAddr && a.Suffrage == b.Suffrage
}

func sameRoles(a, b []tokenapi.Role) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// forceCert makes cfg send its certificate whatever CAs the server asks for.
func forceCert(cfg *tls.Config) *tls.Config {
	cert := cfg.Certificates[0]
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	return cfg
}

// benignBody is a body for rt that changes nothing when accepted: a bad
// member (400), a one-token allocation or token request, the address of a
// member that does not exist (409), a restore to at least 0 (a no-op).
func benignBody(rt tokenservice.Route) []byte {
	switch {
	case rt.Method == http.MethodGet || rt.Method == http.MethodDelete:
		return nil
	case strings.HasSuffix(rt.Path, "/api-addr"):
		return []byte(`{"api_addr":"https://127.0.0.1:1"}`)
	case strings.Contains(rt.Path, "allocate"):
		return []byte(`{"count":1}`)
	case strings.Contains(rt.Path, "tokens"):
		return []byte(`{"resource":"orders/42"}`)
	default:
		return []byte(`{}`)
	}
}

// Bad lines of a node's credentials file are refused with their line
// number; a client's file likewise; a credential never shows its secret.
func TestCredentialsFiles(t *testing.T) {
	t.Parallel()
	good, err := tokenclient.NewClientCredential("app")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, file string
		line       int
		want       string
	}{
		{"too few fields", "# comment\n\napp client\n", 3, "NAME ROLES sha256:HEX"},
		{"unknown role", good.ServerLine("superuser"), 1, "unknown role"},
		{"peer role", good.ServerLine(tokenapi.RolePeer), 1, "only by certificates"},
		{"bad hash", "app client sha256:1234\n", 1, "64 hex digits"},
		{"no hash prefix", "app client " + strings.Repeat("ab", 32) + "\n", 1, "sha256:"},
		{"duplicate name", good.ServerLine(tokenapi.RoleClient) + "\n" + good.ServerLine(tokenapi.RoleAdmin), 2, "twice"},
		{"bad name", "a/b client sha256:" + strings.Repeat("ab", 32), 1, "name"},
		{"a client's secret line", "# ok\n" + good.FileLine(), 2, "client's NAME SECRET line"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tokenservice.ParseCredentials(strings.NewReader(tc.file), "creds.txt")
			if !errors.Is(err, tokenapi.ErrBadCredentials) {
				t.Fatalf("err = %v; want tokenapi.ErrBadCredentials", err)
			}
			if want := fmt.Sprintf("creds.txt line %d:", tc.line); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %q; want %q and %q", err, want, tc.want)
			}
			if strings.Contains(err.Error(), good.Secret) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %q: not one line, or shows the secret", err)
			}
		})
	}
	creds, err := tokenservice.ParseCredentials(strings.NewReader("# node file\n"+good.ServerLine(tokenapi.RoleClient, tokenapi.RoleAdmin)+"\n"), "ok")
	if err != nil || creds.Len() != 1 {
		t.Fatalf("ParseCredentials of a good file: %v, %d credentials", err, creds.Len())
	}

	dir := t.TempDir()
	write := func(name, s string) string {
		p := dir + "/" + name
		if err := pki.WriteNew(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := tokenclient.LoadClientCredential(write("client", "# app's credential\n"+good.FileLine()+"\n"))
	if err != nil || got != good {
		t.Fatalf("LoadClientCredential = %v, %v; want %v", got, err, good)
	}
	for name, tc := range map[string]struct {
		file string
		want string
	}{
		"node line":    {good.ServerLine(tokenapi.RoleClient), "line 1: this is a node's line"},
		"short secret": {"\napp tooshort", "line 2: the secret is too short"},
		"two lines":    {good.FileLine() + "\n" + good.FileLine(), "line 2: a client's file holds one credential"},
		"empty":        {"# nothing\n", "holds no credential"},
	} {
		_, err := tokenclient.LoadClientCredential(write(name, tc.file))
		if !errors.Is(err, tokenapi.ErrBadCredentials) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want %q", name, err, tc.want)
		}
	}
	if _, err := tokenclient.LoadClientCredential(dir + "/missing"); err == nil || !strings.Contains(err.Error(), dir+"/missing") {
		t.Errorf("missing file: err = %v; want the path named", err)
	}

	// The secret never shows in formatting or logs.
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "cred", good)
	for _, s := range []string{fmt.Sprint(good), fmt.Sprintf("%+v", good), fmt.Sprintf("%#v", good), buf.String()} {
		if strings.Contains(s, good.Secret) || !strings.Contains(s, "app") {
			t.Errorf("formatted credential %q shows the secret or hides the name", s)
		}
	}
}
