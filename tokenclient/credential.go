package tokenclient

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"

	"github.com/fencegate/fencegate/tokenapi"
)

// credName is the form of a credential's name; tokenservice checks the
// same form on its side.
var credName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// minSecret is the shortest secret accepted: 32 bytes of randomness in
// base64url (NewClientCredential makes 43 characters).
const minSecret = 32

// ClientCredential is a client's bearer credential: a name and a secret,
// sent as "Authorization: Bearer NAME:SECRET". Formatting it with %v, %+v,
// %#v or slog never shows the secret.
type ClientCredential struct {
	Name   string
	Secret string
}

// NewClientCredential makes a credential for name with a random 256-bit secret.
func NewClientCredential(name string) (ClientCredential, error) {
	if !credName.MatchString(name) {
		return ClientCredential{}, fmt.Errorf("%w: name %q: use letters, digits, '.', '_' or '-' (at most 64)", tokenapi.ErrBadCredentials, name)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return ClientCredential{}, err
	}
	return ClientCredential{Name: name, Secret: base64.RawURLEncoding.EncodeToString(b)}, nil
}

// LoadClientCredential reads a client's credential file: one line
// "NAME SECRET" (blank lines and # comments are ignored).
func LoadClientCredential(path string) (ClientCredential, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return ClientCredential{}, fmt.Errorf("%w: cannot read %s: %v", tokenapi.ErrBadCredentials, path, err)
	}
	var cred ClientCredential
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("%w: %s line %d: %s", tokenapi.ErrBadCredentials, path, n+1, fmt.Sprintf(format, a...))
		}
		if cred.Name != "" {
			return ClientCredential{}, bad("a client's file holds one credential; this is a second one")
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && strings.HasPrefix(f[2], "sha256:"):
			return ClientCredential{}, bad("this is a node's line (NAME ROLES sha256:HASH); a client's file holds NAME SECRET")
		case len(f) != 2:
			return ClientCredential{}, bad("want NAME SECRET")
		case !credName.MatchString(f[0]):
			return ClientCredential{}, bad("name %q: use letters, digits, '.', '_' or '-' (at most 64)", f[0])
		case len(f[1]) < minSecret || strings.ContainsAny(f[1], ":"):
			return ClientCredential{}, bad("the secret is too short or malformed; make one with fencegate token credential")
		}
		cred = ClientCredential{Name: f[0], Secret: f[1]}
	}
	if cred.Name == "" {
		return ClientCredential{}, fmt.Errorf("%w: %s holds no credential; want one line NAME SECRET", tokenapi.ErrBadCredentials, path)
	}
	return cred, nil
}

// FileLine is the line of a client's credential file: "NAME SECRET".
func (c ClientCredential) FileLine() string { return c.Name + " " + c.Secret }

// ServerLine is the line of a node's credentials file for this credential
// with the given roles: "NAME ROLES sha256:HEX".
func (c ClientCredential) ServerLine(roles ...tokenapi.Role) string {
	sum := sha256.Sum256([]byte(c.Secret))
	rs := make([]string, len(roles))
	for i, r := range roles {
		rs[i] = string(r)
	}
	return fmt.Sprintf("%s %s sha256:%s", c.Name, strings.Join(rs, ","), hex.EncodeToString(sum[:]))
}

// String shows the name only.
func (c ClientCredential) String() string { return c.Name + ":[redacted]" }

// GoString shows the name only.
func (c ClientCredential) GoString() string { return c.String() }

// LogValue shows the name only.
func (c ClientCredential) LogValue() slog.Value { return slog.StringValue(c.String()) }

func (c ClientCredential) header() string { return "Bearer " + c.Name + ":" + c.Secret }
