package pgserver

import (
	"strings"
	"testing"
)

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
