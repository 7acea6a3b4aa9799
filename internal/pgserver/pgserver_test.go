package pgserver

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeBinDir makes a directory holding empty stand-ins for the binaries.
func fakeBinDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestFindBinDirHonoursTheVariable(t *testing.T) {
	dir := fakeBinDir(t, 0o755)
	t.Setenv(EnvBinDir, dir)
	got, err := FindBinDir()
	if err != nil || got != dir {
		t.Fatalf("FindBinDir() = %q, %v; want %q", got, err, dir)
	}

	// A directory without the binaries is an error naming the variable,
	// never a silent fall back to another major.
	t.Setenv(EnvBinDir, t.TempDir())
	if _, err := FindBinDir(); err == nil || !strings.Contains(err.Error(), EnvBinDir) {
		t.Fatalf("FindBinDir() with an empty %s: %v, want an error naming it", EnvBinDir, err)
	}
}

func TestUsableByNamesWhatTheServerUserCannotReach(t *testing.T) {
	other := &syscall.Credential{Uid: uint32(os.Getuid()) + 4242, Gid: uint32(os.Getgid()) + 4242}

	ok := fakeBinDir(t, 0o755)
	if err := os.Chmod(filepath.Dir(ok), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := usableBy(ok, other); err != nil {
		t.Fatalf("binaries readable by everyone: %v", err)
	}

	closed := fakeBinDir(t, 0o755)
	if err := os.Chmod(filepath.Dir(closed), 0o700); err != nil {
		t.Fatal(err)
	}
	err := usableBy(closed, other)
	if err == nil || !strings.Contains(err.Error(), filepath.Dir(closed)) || !strings.Contains(err.Error(), "a+rX") {
		t.Fatalf("a parent directory only its owner may enter: %v, want an error naming it", err)
	}

	private := fakeBinDir(t, 0o700)
	if err := os.Chmod(filepath.Dir(private), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := usableBy(private, other); err == nil || !strings.Contains(err.Error(), "initdb") {
		t.Fatalf("binaries only their owner may run: %v, want an error naming initdb", err)
	}
}

func TestServerOptions(t *testing.T) {
	t.Parallel()
	def := serverOptions("/tmp/x", nil)
	if !strings.Contains(def, "-c max_connections=300") || !strings.Contains(def, "-c unix_socket_directories=/tmp/x") {
		t.Errorf("default options: %s", def)
	}
	stock := serverOptions("/tmp/x", []Option{StockLimits(), Setting("work_mem", "8MB")})
	for _, want := range []string{"-c max_connections=100", "-c max_locks_per_transaction=64", "-c max_prepared_transactions=0", "-c work_mem=8MB"} {
		if !strings.Contains(stock, want) {
			t.Errorf("with StockLimits: %s lacks %s", stock, want)
		}
	}
	if strings.Contains(stock, "max_connections=300") {
		t.Errorf("with StockLimits: %s still raises max_connections", stock)
	}
}
