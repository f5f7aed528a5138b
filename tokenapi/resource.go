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

// ValidateResource checks a resource name by the one rule the service, the
// Go client and the Python client share: not empty (nor only spaces), valid
// UTF-8 without NUL or U+FFFD, and at most MaxResource bytes. The client
// checks it before any network write; the API refuses a name that breaks
// it with ErrEmptyResource or ErrBadResource (400, CodeBadRequest).
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
