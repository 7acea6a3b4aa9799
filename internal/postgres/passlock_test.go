package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ptah-run/ptah/internal/pgtest"
)

func TestPassLockIsExclusiveAndNamesItsHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDB(t)
	first, second := dial(t, url), dial(t, url)

	release, err := TryPassLock(ctx, first, "PtahSchema/default/app")
	if err != nil {
		t.Fatal(err)
	}
	// Another resource's pass is independent.
	otherRelease, err := TryPassLock(ctx, second, "PtahSchema/default/other")
	if err != nil {
		t.Fatalf("another resource's pass lock: %v", err)
	}
	_ = otherRelease(ctx)

	_, err = TryPassLock(ctx, second, "PtahSchema/default/app")
	var busy *PassBusyError
	if !errors.As(err, &busy) || !errors.Is(err, ErrPassBusy) {
		t.Fatalf("second taker: %v; want a PassBusyError", err)
	}
	if busy.Holder == nil || uint32(busy.Holder.PID) != first.PgConn().PID() {
		t.Fatalf("holder %+v; want the first session, pid %d", busy.Holder, first.PgConn().PID())
	}
	if !strings.Contains(err.Error(), "ptah pid ") {
		t.Fatalf("the message must name the holding process: %v", err)
	}

	if err := release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := TryPassLock(ctx, second, "PtahSchema/default/app")
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	_ = again(ctx)
}
