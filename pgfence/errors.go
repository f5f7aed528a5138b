package pgfence

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrNotInstalled: schema fencegate is missing from the database.
	ErrNotInstalled = errors.New("pgfence: schema fencegate is not installed")
	// ErrNewerSchema: the installed schema is of a later version than this
	// package knows; nothing was changed.
	ErrNewerSchema = errors.New("pgfence: schema fencegate is of a newer version")
	// ErrPrivilege: the connected role lacks a privilege the operation
	// needs; the error says which.
	ErrPrivilege = errors.New("pgfence: insufficient privilege")
	// ErrOwnerRole: the owner role cannot be used (it can log in, or is a
	// superuser).
	ErrOwnerRole = errors.New("pgfence: unusable owner role")
	// ErrNoRole: a role named in InstallOptions.Grant does not exist.
	ErrNoRole = errors.New("pgfence: no such role")
	// ErrNotProtected: the table is not protected.
	ErrNotProtected = errors.New("pgfence: table is not protected")
	// ErrBadInput: the database refused an argument (a table that does not
	// exist or is not a table, a resource expression that does not parse or
	// reaches what a resource may not depend on, a negative token, ...). The
	// wrapped *pgconn.PgError carries the database's message and hint.
	ErrBadInput = errors.New("pgfence: refused")
	// ErrLocked: an install, upgrade, repair or require-signed gave up
	// waiting for a lock held by other sessions (RepairLockTimeout), so as
	// not to hold up every fence queued behind its request; the error
	// names the sessions holding the locks. Nothing was changed.
	ErrLocked = errors.New("pgfence: other sessions hold locks the installer needs")
	// ErrUnexpectedObjects: schema fencegate or one of its tables holds
	// objects fencegate did not create that Install cannot remove safely
	// (a planted signing_keys holding data, an expected column of another
	// type, a column whose type is not built in, ...); the error names
	// them.
	ErrUnexpectedObjects = errors.New("pgfence: schema fencegate holds objects that fencegate did not create")
)

// classify wraps err, an error from the database, with the sentinel that
// says what kind of failure it is, keeping the *pgconn.PgError reachable.
func classify(err error) error {
	var pg *pgconn.PgError
	if !errors.As(err, &pg) {
		return err
	}
	switch {
	case pg.Code == "42501": // insufficient_privilege
		return fmt.Errorf("%w: %w", ErrPrivilege, err)
	case pg.Code == "3F000" && pg.Message == `schema "fencegate" does not exist`,
		pg.Code == "42P01" && strings.HasPrefix(pg.Message, `relation "fencegate.`),
		pg.Code == "42883" && containsFencegateFunc(pg.Message):
		return fmt.Errorf("%w: %w", ErrNotInstalled, err)
	case pg.Code == fencegate.CodeMisuse, pg.Code == "42P01", pg.Code == "42601", pg.Code == "42703",
		pg.Code == "42P17", pg.Code == "0A000", pg.Code == "22023", pg.Code == "42804",
		pg.Code == "42883", pg.Code == "3F000", pg.Code == "42846", pg.Code == "22P02":
		return fmt.Errorf("%w: %w", ErrBadInput, err)
	}
	return err
}

// containsFencegateFunc reports whether msg ("function X does not exist")
// names one of the schema's own functions.
func containsFencegateFunc(msg string) bool {
	for _, f := range functions {
		if strings.Contains(msg, "function fencegate."+f.name+"(") {
			return true
		}
	}
	return false
}

// pgCode returns the SQLSTATE of the *pgconn.PgError in err's chain, or "".
func pgCode(err error) string {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		return pg.Code
	}
	return ""
}
