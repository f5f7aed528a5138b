package tokenclient

import (
	"fmt"
	"net"
	"net/url"
	"strings"
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
