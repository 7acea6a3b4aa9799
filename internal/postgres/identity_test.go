package postgres

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"testing"

	"github.com/ptah-run/ptah/internal/pgtest"
)

func TestTargetIdentity(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	conn := dial(t, url)
	id, err := TargetIdentity(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	var sysid, db string
	var oid uint32
	if err := conn.QueryRow(ctx, `SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database(),
		(SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&sysid, &db, &oid); err != nil {
		t.Fatal(err)
	}
	if id.SystemIdentifier != sysid || id.Minted() || id.Database != db || id.DatabaseOID != oid ||
		!regexp.MustCompile(`^1[5-9]\.|^[2-9]\d\.`).MatchString(id.ServerVersion) {
		t.Errorf("identity = %+v, want system identifier %s, database %s (%d)", id, sysid, db, oid)
	}
	if !regexp.MustCompile(`^\d+$`).MatchString(id.SystemIdentifier) {
		t.Errorf("system identifier %q is not a decimal number", id.SystemIdentifier)
	}

	// Another database on the same server shares the system identifier
	// and differs in name and OID.
	other, err := TargetIdentity(ctx, dial(t, pgtest.NewDB(t)))
	if err != nil {
		t.Fatal(err)
	}
	if other.SystemIdentifier != id.SystemIdentifier || other.Database == id.Database || other.DatabaseOID == id.DatabaseOID {
		t.Errorf("identities of two databases on one server: %+v and %+v", id, other)
	}
}

var roleCounter struct {
	sync.Mutex
	n int
}

// TestTargetIdentityWithoutPgControlSystem: a role that may not call
// pg_control_system() gets an identifier minted once for the database, the
// same on every call and from every session.
func TestTargetIdentityWithoutPgControlSystem(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDB(t)
	ctx := testCtx(t)
	admin := dial(t, url)
	roleCounter.Lock()
	roleCounter.n++
	role := fmt.Sprintf("ptah_identity_%d_%d", os.Getpid(), roleCounter.n)
	roleCounter.Unlock()
	// pg_proc is per database: the revoke affects this test's database only.
	if _, err := admin.Exec(ctx, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN;
		GRANT CREATE ON DATABASE %[2]s TO %[1]s;
		REVOKE EXECUTE ON FUNCTION pg_control_system() FROM PUBLIC`, role, admin.Config().Database)); err != nil {
		if IsInsufficientPrivilege(err) {
			t.Fatalf("this test needs a role that may create roles (the throwaway server's superuser does; check PTAH_TEST_DATABASE_URL): %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, "DROP OWNED BY "+role)
		_, _ = admin.Exec(ctx, "DROP ROLE "+role)
	})
	roleURL := regexp.MustCompile(`^postgres://[^@/]*@`).ReplaceAllString(url, "postgres://"+role+"@")

	plain := dial(t, roleURL)
	first, err := TargetIdentity(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	if !first.Minted() || !regexp.MustCompile(`^ptah:[0-9a-f-]{36}$`).MatchString(first.SystemIdentifier) {
		t.Fatalf("identity without pg_control_system = %+v, want a minted identifier", first)
	}
	again, err := TargetIdentity(ctx, dial(t, roleURL))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("minted identity changed between sessions: %+v then %+v", first, again)
	}
}
