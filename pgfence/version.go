package pgfence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL majors fencegate supports: each one runs the enforcement
// and attack suites (scripts/pg-matrix.sh reads this range; README.md and
// docs/operations.md#supported-postgresql-versions link to it). The fence
// lives inside PostgreSQL, so its major is fencegate's runtime: catalogs,
// constraint kinds and privileges change between majors, and a major no
// suite has run on is not known to be safe.
const (
	// MinMajor is the oldest supported major. 13 is refused: it lacks
	// pg_type.typsubscript, which the resource expression check reads, and
	// is past its end of life.
	MinMajor = 14
	// MaxMajor is the newest major the suites have run on. A newer one is
	// refused unless the caller says to go on (InstallOptions.AllowNewerServer,
	// the gate's Config.AllowNewerServer).
	MaxMajor = 18
)

// SupportedRange names the supported majors for messages.
var SupportedRange = fmt.Sprintf("PostgreSQL %d to %d", MinMajor, MaxMajor)

var (
	// ErrUnsupportedServer: the server's major is older than MinMajor.
	// Nothing was changed.
	ErrUnsupportedServer = errors.New("pgfence: unsupported PostgreSQL version")
	// ErrUntestedServer: the server's major is newer than MaxMajor and the
	// caller did not allow it. Nothing was changed.
	ErrUntestedServer = errors.New("pgfence: untested PostgreSQL version")
)

// ServerVersion is a server's version as it reports it.
type ServerVersion struct {
	Num  int    // server_version_num: 180004 for 18.4
	Text string // server_version: "18.4", "15.19 (Debian 15.19-0+deb12u1)"
}

// Major returns the major version (18 for 18.4).
func (v ServerVersion) Major() int { return v.Num / 10000 }

// short is the version without the distribution's suffix.
func (v ServerVersion) short() string {
	if f := strings.Fields(v.Text); len(f) > 0 {
		return f[0]
	}
	return strconv.Itoa(v.Num)
}

// Check returns nil when the server's major is supported, ErrUnsupportedServer
// when it is older than MinMajor, and ErrUntestedServer when it is newer than
// MaxMajor unless allowNewer. The message names the server's version and the
// supported range.
func (v ServerVersion) Check(allowNewer bool) error {
	switch m := v.Major(); {
	case m < MinMajor:
		return fmt.Errorf("%w: the server runs PostgreSQL %s; fencegate supports %s", ErrUnsupportedServer, v.short(), SupportedRange)
	case m > MaxMajor && !allowNewer:
		return fmt.Errorf("%w: the server runs PostgreSQL %s, newer than fencegate is tested on (%s)", ErrUntestedServer, v.short(), SupportedRange)
	}
	return nil
}

// ParseServerVersion reads server_version as a server reports it (in a
// ParameterStatus at startup, or SHOW server_version): "18.4", "17beta1",
// "15.19 (Debian 15.19-0+deb12u1)". Majors since 10 have one number before
// the dot; the minor is 0 where none is given.
func ParseServerVersion(s string) (ServerVersion, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ServerVersion{}, fmt.Errorf("pgfence: empty server_version")
	}
	head := f[0]
	end := 0
	for end < len(head) && head[end] >= '0' && head[end] <= '9' {
		end++
	}
	major, err := strconv.Atoi(head[:end])
	if err != nil || major < 1 {
		return ServerVersion{}, fmt.Errorf("pgfence: server_version %q does not start with a major version", s)
	}
	nums := []int{major}
	for rest := head[end:]; len(nums) < 3 && strings.HasPrefix(rest, "."); {
		rest = rest[1:]
		n := 0
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		v, _ := strconv.Atoi(rest[:n])
		nums = append(nums, v)
		rest = rest[n:]
	}
	nums = append(nums, 0, 0)
	if major < 10 { // 9.6.24: the second number belongs to the major
		return ServerVersion{Num: major*10000 + nums[1]*100 + nums[2], Text: s}, nil
	}
	return ServerVersion{Num: major*10000 + nums[1], Text: s}, nil
}

// ReadServerVersion asks the server for its version: q is a *pgx.Conn or a
// pgx.Tx.
func ReadServerVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (ServerVersion, error) {
	var v ServerVersion
	if err := q.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::pg_catalog.int4, pg_catalog.current_setting('server_version')`).Scan(&v.Num, &v.Text); err != nil {
		return ServerVersion{}, fmt.Errorf("read the server's version: %w", classify(err))
	}
	return v, nil
}
