package catalog

import (
	"testing"

	"github.com/ptah-run/ptah/internal/pgtest"
)

// TestMain stops the throwaway server the tests of this directory (package
// postgres and postgres_test share one binary) started.
func TestMain(m *testing.M) { pgtest.Main(m) }
