package memstore_test

import (
	"testing"

	"github.com/ptah-run/ptah/internal/store"
	"github.com/ptah-run/ptah/internal/store/memstore"
	"github.com/ptah-run/ptah/internal/store/storetest"
)

func TestContract(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memstore.New() })
}
