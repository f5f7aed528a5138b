package tokenapi

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxResource caps resource names, in bytes.
const MaxResource = 1024

// ErrBadResource is the ErrBadRequest for a resource name the service does
// not take: not UTF-8, holding a NUL or a U+FFFD (what a lossy decoder makes
// of bytes that are not UTF-8), or longer than MaxResource bytes. The API
// answers it with 400 and code bad_request.
var ErrBadResource = fmt.Errorf("%w: bad resource name", ErrBadRequest)

// ResourceSpaces lists the runes a resource name may not consist of alone:
// Go's unicode.IsSpace (Unicode White_Space). The Python and Node.js
// clients spell out the same list; a test checks it against the Go table.
const ResourceSpaces = "\t\n\v\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"

// ValidateResource checks a resource name by the one rule the service and
// every client (Go lockclient and tokenclient, Python, Node.js) share: not
// empty nor only ResourceSpaces, valid UTF-8 without NUL or U+FFFD, and at
// most MaxResource bytes. The clients check it before any network write;
// the API refuses a name that breaks it with ErrEmptyResource or
// ErrBadResource (400, CodeBadRequest). testdata/resource-names.json holds
// the rule case by case; every client's suite runs it.
func ValidateResource(res string) error {
	switch {
	case strings.TrimSpace(res) == "":
		return ErrEmptyResource
	case len(res) > MaxResource:
		return fmt.Errorf("%w: it is %d bytes; keep it to at most %d", ErrBadResource, len(res), MaxResource)
	case !utf8.ValidString(res):
		return fmt.Errorf("%w: it is not valid UTF-8", ErrBadResource)
	case strings.ContainsRune(res, 0):
		return fmt.Errorf("%w: it holds a NUL byte", ErrBadResource)
	case strings.ContainsRune(res, utf8.RuneError):
		return fmt.Errorf("%w: it holds U+FFFD, the mark of bytes that were not UTF-8", ErrBadResource)
	}
	return nil
}
