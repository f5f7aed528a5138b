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
func PrepareDataDir(dir string) (string, error) {
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
			return "", fmt.Errorf("data directory %s holds files fencegate did not put there; pick another with --data-dir", abs)
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
