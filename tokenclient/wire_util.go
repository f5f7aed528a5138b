package tokenclient

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate/tokenapi"
)

// NormalizeURL turns "host:port" or "http://host:port[/]" into "http://host:port".
func NormalizeURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("%q is not a URL like http://127.0.0.1:7101 or a HOST:PORT", s)
	}
	if _, _, err := net.SplitHostPort(u.Host); err != nil {
		return "", fmt.Errorf("%q has no port; write HOST:PORT", s)
	}
	return u.Scheme + "://" + u.Host, nil
}

// isAPIError reports whether body is the token API's error form: JSON with
// a "code".
func isAPIError(body []byte) bool {
	var e tokenapi.ErrorResponse
	return json.Unmarshal(body, &e) == nil && e.Code != ""
}

// plausible reports whether a decoded 200 answer can come from the token
// API: a token answer holds tokens above 0. Another JSON API's answer
// decodes into zeros.
func plausible(out any) bool {
	switch v := out.(type) {
	case *tokenapi.TokenResponse:
		return v.Token > 0
	case *tokenapi.BatchResponse:
		for _, t := range v.Tokens {
			if t.Token <= 0 {
				return false
			}
		}
		return len(v.Tokens) > 0
	}
	return true
}
