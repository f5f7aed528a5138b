package devstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultDataDir is where "fencegate dev" keeps its data unless told otherwise.
const DefaultDataDir = "fencegate-data"

// markerFile marks a directory as a fencegate dev data directory, so that
// RemoveDataDir never deletes a directory someone pointed it at by mistake.
const markerFile = ".fencegate-dev"

// PrepareDataDir creates dir (and its marker) when missing and returns its
// absolute path. An existing non-empty directory without the marker is refused.
func PrepareDataDir(dir string) (string, error) { return prepareDataDir(dir, "") }

// prepareDataDir is PrepareDataDir; a refusal names setting, when set, as
// the one that picks another directory.
func prepareDataDir(dir, setting string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	entries, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return "", fmt.Errorf("create data directory %s: %w", abs, err)
		}
	case err != nil:
		return "", fmt.Errorf("read data directory %s: %w", abs, err)
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(abs, markerFile)); err != nil {
			if setting == "" {
				return "", fmt.Errorf("data directory %s holds files fencegate did not put there; pick another", abs)
			}
			return "", fmt.Errorf("data directory %s holds files fencegate did not put there; pick another with %s", abs, setting)
		}
	}
	if err := os.WriteFile(filepath.Join(abs, markerFile), []byte("fencegate dev data directory; remove with fencegate dev --reset\n"), 0o644); err != nil {
		return "", fmt.Errorf("mark data directory %s: %w", abs, err)
	}
	return abs, nil
}

// RemoveDataDir deletes a data directory made by PrepareDataDir. A missing
// directory is not an error; one without the marker is refused.
func RemoveDataDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, err := os.Stat(filepath.Join(abs, markerFile)); err != nil {
		return fmt.Errorf("refuse to remove %s: it is not a fencegate dev data directory (no %s)", abs, markerFile)
	}
	if err := os.RemoveAll(abs); err != nil {
		return fmt.Errorf("remove data directory %s: %w", abs, err)
	}
	return nil
}

// ResetDataDir empties a data directory made by PrepareDataDir but keeps
// its pgpass file: the application role a stack created stays on the
// PostgreSQL server, and its password is known only there. kept says
// whether there was one to keep.
func ResetDataDir(dir string) (kept bool, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	var pgpass []byte
	if _, err := os.Stat(filepath.Join(abs, markerFile)); err == nil {
		pgpass, err = os.ReadFile(filepath.Join(abs, "pgpass"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, fmt.Errorf("read %s: %w", filepath.Join(abs, "pgpass"), err)
		}
	}
	if err := RemoveDataDir(abs); err != nil {
		return false, err
	}
	if pgpass == nil {
		return false, nil
	}
	if _, err := PrepareDataDir(abs); err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(abs, "pgpass"), pgpass, 0o600); err != nil {
		return false, fmt.Errorf("keep %s: %w", filepath.Join(abs, "pgpass"), err)
	}
	return true, nil
}
