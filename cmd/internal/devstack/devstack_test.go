package devstack

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/internal/testutil"
)

func TestDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	abs, err := PrepareDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := PrepareDataDir(dir); err != nil {
		t.Fatalf("PrepareDataDir twice: %v", err)
	}
	if err := RemoveDataDir(abs); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after RemoveDataDir", abs)
	}
	other := t.TempDir()
	os.WriteFile(filepath.Join(other, "precious"), []byte("x"), 0o644)
	if _, err := PrepareDataDir(other); err == nil {
		t.Fatal("PrepareDataDir accepted a foreign non-empty directory")
	}
	if err := RemoveDataDir(other); err == nil {
		t.Fatal("RemoveDataDir removed a foreign directory")
	}
}

func TestMain(m *testing.M) { testutil.Main(m) }
