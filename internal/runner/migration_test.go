package runner

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ptah-run/ptah/internal/engine"
	"github.com/ptah-run/ptah/internal/migrate"
	"github.com/ptah-run/ptah/internal/pgtest"
	"github.com/ptah-run/ptah/internal/postgres"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// migFixture is a fresh target database and a PtahMigration of a
// directory of files on it.
type migFixture struct {
	t        *testing.T
	ctx      context.Context
	url      string
	conn     *pgx.Conn
	identity string
	res      Resource
}

var migBinding = api.ExecutionBinding{PtahVersion: "test", ContractVersion: api.ContractVersion, Engine: api.EnginePostgres}

// newMigFixture writes files (name -> contents) to a directory, reads it
// as a migration source, and gives the migration a database of its own.
func newMigFixture(t *testing.T, files map[string]string) *migFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	url := pgtest.NewDB(t)
	conn := migDial(t, ctx, url)
	id, err := postgres.TargetIdentity(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	f := &migFixture{t: t, ctx: ctx, url: url, conn: conn, identity: TargetIdentityDigest(id)}
	f.res = migResource(t, url, files)
	return f
}

func migDial(t *testing.T, ctx context.Context, url string) *pgx.Conn {
	t.Helper()
	conn, err := postgres.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func migResource(t *testing.T, url string, files map[string]string) Resource {
	t.Helper()
	dir := t.TempDir()
	for name, sql := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(sql), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := &api.PtahMigration{Spec: api.PtahMigrationSpec{Source: api.MigrationSource{Path: dir}}}
	m.Name = "app"
	m.Default()
	src, err := migrate.ReadDir(dir, migrate.LayoutDetect)
	if err != nil {
		t.Fatal(err)
	}
	return Resource{Migration: m, TargetURL: url, Source: src}
}

func (f *migFixture) observe(st api.PtahMigrationStatus) *engine.MigrationObservation {
	f.t.Helper()
	obs, err := observeMigration(f.ctx, f.conn, f.res, f.identity, st, migBinding)
	if err != nil {
		f.t.Fatalf("observeMigration: %v", err)
	}
	return obs
}

// record records rows in the migration's history, as a person marks them.
func (f *migFixture) record(rows ...postgres.HistoryRow) {
	f.t.Helper()
	err := pgx.BeginFunc(f.ctx, f.conn, func(tx pgx.Tx) error {
		return postgres.RecordHistory(f.ctx, tx, f.res.storeResource(), rows, postgres.HowMarked)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *migFixture) file(version string) *migrate.File {
	f.t.Helper()
	for _, file := range f.res.Source.Files {
		if file.Version.String() == version {
			return file
		}
	}
	f.t.Fatalf("no file of version %s", version)
	return nil
}

// row is the history row of version as its file is now.
func (f *migFixture) row(version string) postgres.HistoryRow {
	file := f.file(version)
	return postgres.HistoryRow{Version: version, Name: file.Name, Checksum: file.Checksum, AppliedBy: "test"}
}

// planSpec is the plan the engine would publish from obs.
func (f *migFixture) planSpec(obs *engine.MigrationObservation) api.PtahMigrationPlanSpec {
	spec := api.PtahMigrationPlanSpec{Migration: api.ObjectReference{Name: "app", UID: "uid-app"}, Versions: obs.Pending,
		LockTimeout: obs.LockTimeout, Bindings: obs.Bindings}
	spec.Fingerprint = engine.MigrationPlanFingerprint(spec)
	return spec
}

// execute runs plan on a writer of its own under operation op, and
// returns Execute's error and the run's journal.
func (f *migFixture) execute(op string, plan *postgres.Plan, progress postgres.ProgressFunc) (*postgres.Run, postgres.Session, error) {
	f.t.Helper()
	w, err := postgres.OpenWriter(f.ctx, f.url, MigrationCoordinationDigest(f.res.Migration.Spec, f.identity), op,
		f.res.storeResource(), time.Now().Add(time.Hour))
	if err != nil {
		f.t.Fatal(err)
	}
	runErr := w.Execute(f.ctx, "plan-"+op, plan, progress)
	_ = w.Release(f.ctx)
	run, err := postgres.ReadRun(f.ctx, f.conn, op)
	if err != nil {
		f.t.Fatal(err)
	}
	return run, w.Session(), runErr
}

func (f *migFixture) history() []postgres.HistoryRow {
	f.t.Helper()
	rows, err := postgres.ReadHistory(f.ctx, f.conn, f.res.storeResource())
	if err != nil {
		f.t.Fatal(err)
	}
	return rows
}

func historyVersions(rows []postgres.HistoryRow) []string {
	out := []string{}
	for _, r := range rows {
		out = append(out, r.Version+":"+r.How)
	}
	return out
}

func (f *migFixture) exists(regclass string) bool {
	f.t.Helper()
	var ok bool
	if err := f.conn.QueryRow(f.ctx, "SELECT to_regclass($1) IS NOT NULL", regclass).Scan(&ok); err != nil {
		f.t.Fatal(err)
	}
	return ok
}

func pendingVersions(obs *engine.MigrationObservation) []string {
	out := []string{}
	for _, p := range obs.Pending {
		out = append(out, p.Version)
	}
	return out
}

var threeFiles = map[string]string{
	"0001_users.sql":  "CREATE TABLE public.users (id int PRIMARY KEY, email text);\nINSERT INTO public.users VALUES (1, 'a');\n",
	"0002_posts.sql":  "CREATE TABLE public.posts (id int PRIMARY KEY, user_id int REFERENCES public.users);\n",
	"0003_index.sql":  "-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY users_email ON public.users (email);\nCREATE INDEX CONCURRENTLY posts_user ON public.posts (user_id);\n",
	"README.md":       "not a migration",
	".#0004_x.sql":    "an editor's lock file",
	"0000_ignore.txt": "not sql",
}

// TestMigrationBindings: the coordination digest is the schema family's
// for the same target (one census, one lease for both families), and
// moves with the coordination key; the policy fingerprint moves with
// each policy field and never equals a schema's.
func TestMigrationBindings(t *testing.T) {
	t.Parallel()
	target := api.Target{Engine: api.EnginePostgres, URL: "postgres://x/db"}
	mig := api.PtahMigrationSpec{Target: target, Policy: api.MigrationPolicy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}
	schema := api.PtahSchemaSpec{Target: target, Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}
	if got, want := MigrationCoordinationDigest(mig, "sha256:t"), CoordinationDigest(schema, "sha256:t"); got != want {
		t.Errorf("coordination digest: migration %s, schema %s; one target must have one digest", got, want)
	}
	keyed := mig
	keyed.Target.CoordinationKey = "shared"
	if MigrationCoordinationDigest(keyed, "sha256:t") == MigrationCoordinationDigest(mig, "sha256:t") {
		t.Error("the coordination key does not move the digest")
	}
	if MigrationCoordinationDigest(mig, "sha256:u") == MigrationCoordinationDigest(mig, "sha256:t") {
		t.Error("the target identity does not move the digest")
	}
	base := MigrationPolicyFingerprint(mig)
	always, slower := mig, mig
	always.Policy.Apply = api.ApplyAlways
	slower.Policy.LockTimeout = "6s"
	if MigrationPolicyFingerprint(always) == base || MigrationPolicyFingerprint(slower) == base {
		t.Error("a policy field does not move the policy fingerprint")
	}
	if base == PolicyFingerprint(api.PtahSchemaSpec{Policy: api.Policy{Apply: api.ApplyOnApproval, LockTimeout: "5s"}}) {
		t.Error("a migration's policy fingerprint equals a schema's")
	}
}

// TestObserveMigrationOnAnEmptyHistoryHasEveryFilePending: every file is
// pending, in order, as written, with its checksum and transaction mode;
// the bindings are the source's digest, the shared coordination digest,
// the policy's and the empty history's fingerprints.
func TestObserveMigrationOnAnEmptyHistoryHasEveryFilePending(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	obs := f.observe(api.PtahMigrationStatus{})
	if obs.Blocked || !slices.Equal(pendingVersions(obs), []string{"0001", "0002", "0003"}) {
		t.Fatalf("observation: blocked %v (%s), pending %v; want 0001-0003 pending", obs.Blocked, obs.Message, pendingVersions(obs))
	}
	for i, p := range obs.Pending {
		file := f.res.Source.Files[i]
		if p.Name != file.Name || p.Checksum != file.Checksum || p.NoTransaction != (p.Version == "0003") {
			t.Errorf("pending %d = %+v; want the file %s", i, p, file.Path)
		}
	}
	b := obs.Bindings
	want := api.Bindings{
		ArtifactDigest: f.res.Source.Digest(), CoordinationDigest: CoordinationDigest(api.PtahSchemaSpec{Target: f.res.Migration.Spec.Target}, f.identity),
		TargetIdentityDigest: f.identity, PolicyFingerprint: MigrationPolicyFingerprint(f.res.Migration.Spec),
		HistoryFingerprint: migrate.HistoryFingerprint(nil, ""), ExecutionBinding: migBinding,
	}
	if b != want {
		t.Errorf("bindings = %+v\nwant %+v", b, want)
	}
	if obs.History != (api.HistorySummary{Applied: 0, Fingerprint: want.HistoryFingerprint}) || obs.LockTimeout != "5s" {
		t.Errorf("history %+v, lock timeout %q", obs.History, obs.LockTimeout)
	}
}

// TestObserveMigrationAfterRecordedVersionsHasTheRestPending: with 0001
// and 0002 recorded, only 0003 is pending, and the summary and the
// fingerprint are those of the rows recorded.
func TestObserveMigrationAfterRecordedVersionsHasTheRestPending(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	f.record(f.row("0001"), f.row("0002"))
	obs := f.observe(api.PtahMigrationStatus{})
	if obs.Blocked || !slices.Equal(pendingVersions(obs), []string{"0003"}) {
		t.Fatalf("observation: blocked %v (%s), pending %v; want 0003", obs.Blocked, obs.Message, pendingVersions(obs))
	}
	rows := appliedRows(f.history())
	fp := migrate.HistoryFingerprint(rows, "")
	if obs.History != (api.HistorySummary{Applied: 2, LastApplied: "0002", Fingerprint: fp}) || obs.Bindings.HistoryFingerprint != fp {
		t.Errorf("history %+v, bound %s; want 2 applied, the last 0002, fingerprint %s", obs.History, obs.Bindings.HistoryFingerprint, fp)
	}
	if fp == migrate.HistoryFingerprint(nil, "") {
		t.Error("the fingerprint does not move with the rows")
	}
}

// TestObserveMigrationBlocksOnHistoryTheSourceCannotAccountFor: a
// recorded checksum that is not the file's (HistoryModified), a recorded
// version the source lacks (HistoryAhead), a file older than the newest
// recorded version (OutOfOrder): each blocks, names its version, and
// leaves nothing pending.
func TestObserveMigrationBlocksOnHistoryTheSourceCannotAccountFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rows    func(f *migFixture) []postgres.HistoryRow
		reason  string
		mention string
	}{
		{"modified", func(f *migFixture) []postgres.HistoryRow {
			r := f.row("0001")
			r.Checksum = "sha256:0123456789abcdef"
			return []postgres.HistoryRow{r}
		}, api.ReasonHistoryModified, "0001 (0001_users.sql: applied as 0123456789ab"},
		{"ahead", func(f *migFixture) []postgres.HistoryRow {
			return []postgres.HistoryRow{f.row("0001"), f.row("0002"), f.row("0003"),
				{Version: "0009", Name: "gone", Checksum: "sha256:9"}}
		}, api.ReasonHistoryAhead, "0009 (gone, marked)"},
		{"out of order", func(f *migFixture) []postgres.HistoryRow {
			return []postgres.HistoryRow{f.row("0002")}
		}, api.ReasonOutOfOrder, "0001 (0001_users.sql)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newMigFixture(t, threeFiles)
			f.record(tc.rows(f)...)
			obs := f.observe(api.PtahMigrationStatus{})
			if !obs.Blocked || obs.Reason != tc.reason || !strings.Contains(obs.Message, tc.mention) || len(obs.Pending) != 0 {
				t.Fatalf("observation: blocked %v, reason %s, pending %v, message %q; want %s naming %q",
					obs.Blocked, obs.Reason, pendingVersions(obs), obs.Message, tc.reason, tc.mention)
			}
		})
	}
}

// gone records a session of url and ends it; the session it returns is
// gone from the server.
func (f *migFixture) goneSession() postgres.Session {
	f.t.Helper()
	conn, err := postgres.Connect(f.ctx, f.url)
	if err != nil {
		f.t.Fatal(err)
	}
	s := f.session(conn)
	var ended bool
	if err := f.conn.QueryRow(f.ctx, "SELECT pg_terminate_backend($1, 30000)", s.PID).Scan(&ended); err != nil || !ended {
		f.t.Fatalf("ending session %d: %v, %v", s.PID, ended, err)
	}
	conn.Close(context.Background())
	return s
}

func (f *migFixture) session(conn *pgx.Conn) postgres.Session {
	f.t.Helper()
	var s postgres.Session
	err := conn.QueryRow(f.ctx, "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()").Scan(&s.PID, &s.BackendStart)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// journalRun journals a run of the migration as a writer does when it
// starts: unfinished, by session s, with its deadline an hour away; steps
// are the versions of its statements, journaled started and not
// committed.
func (f *migFixture) journalRun(op string, s postgres.Session, versions ...string) {
	f.t.Helper()
	f.record() // creates the runtime tables
	_, err := f.conn.Exec(f.ctx, `INSERT INTO ptah.runs (operation_id, resource, plan_uid, writer_pid, writer_backend_start, deadline,
		phases, started_at, contract_version) VALUES ($1, $2, 'plan-x', $3, $4, clock_timestamp() + interval '1 hour', 1, clock_timestamp(), $5)`,
		op, f.res.storeResource(), s.PID, s.BackendStart, api.ContractVersion)
	if err != nil {
		f.t.Fatal(err)
	}
	for i, v := range versions {
		_, err := f.conn.Exec(f.ctx, `INSERT INTO ptah.run_steps (operation_id, step, phase, statement, started_at, no_transaction, version)
			VALUES ($1, $2, 1, 'SELECT 1', clock_timestamp(), true, $3)`, op, i+1, v)
		if err != nil {
			f.t.Fatal(err)
		}
	}
}

// TestObserveMigrationHoldsUnresolvedAndDirtyRuns: a run status records
// as unresolved blocks (UnresolvedRun), and its operation is in the
// history fingerprint; a run the journal shows started and unfinished,
// whose writer session is gone and for which no record stands, blocks as
// dirty, naming its operation and the versions it started, and is in the
// fingerprint too. A record standing for it (the status's last, resolved
// or active run, a version a person marked for it), a later run, or a
// writer still alive, each leaves it not dirty.
func TestObserveMigrationHoldsUnresolvedAndDirtyRuns(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	f.record(f.row("0001"))
	rows := appliedRows(f.history())
	clean := migrate.HistoryFingerprint(rows, "")

	unresolved := api.PtahMigrationStatus{UnresolvedRun: &api.UnresolvedRun{Outcome: api.OutcomeUnknown, OperationID: "op-u"}}
	obs := f.observe(unresolved)
	if !obs.Blocked || obs.Reason != api.ReasonUnresolvedRun || !strings.Contains(obs.Message, "op-u") || len(obs.Pending) != 0 {
		t.Fatalf("with an unresolved run: blocked %v, reason %s, message %q", obs.Blocked, obs.Reason, obs.Message)
	}
	if want := migrate.HistoryFingerprint(rows, "op-u"); obs.History.Fingerprint != want || obs.Bindings.HistoryFingerprint != want {
		t.Errorf("fingerprint with an unresolved run %s, want %s (with its mark)", obs.History.Fingerprint, want)
	}

	gone := f.goneSession()
	f.journalRun("op-d", gone, "0002", "0002")
	obs = f.observe(api.PtahMigrationStatus{})
	if !obs.Blocked || obs.Reason != api.ReasonHistoryDirty || len(obs.Pending) != 0 ||
		!strings.Contains(obs.Message, "run op-d started and never finished") || !strings.Contains(obs.Message, "versions 0002 may have run") {
		t.Fatalf("with a dirty run: blocked %v, reason %s, message %q; want HistoryDirty naming op-d and 0002", obs.Blocked, obs.Reason, obs.Message)
	}
	if want := migrate.HistoryFingerprint(rows, "op-d"); obs.History.Fingerprint != want {
		t.Errorf("fingerprint with a dirty run %s, want %s (with its mark)", obs.History.Fingerprint, want)
	}

	// The unresolved record stands for it: one hold, not two.
	unresolved.UnresolvedRun.OperationID = "op-d"
	obs = f.observe(unresolved)
	if obs.Reason != api.ReasonUnresolvedRun || strings.Contains(obs.Message, "DirtyRun") ||
		obs.History.Fingerprint != migrate.HistoryFingerprint(rows, "op-d") {
		t.Errorf("with the dirty run recorded unresolved: reason %s, message %q", obs.Reason, obs.Message)
	}

	for name, st := range map[string]api.PtahMigrationStatus{
		"last run":     {LastRun: &api.AppliedPlan{OperationID: "op-d", Outcome: api.OutcomeFailed}},
		"resolved run": {ResolvedRun: &api.ResolvedRun{OperationID: "op-d", By: "ana"}},
		"active claim": {RunState: api.RunState{ActiveOperation: &api.Operation{ID: "op-d"}}},
	} {
		if obs := f.observe(st); obs.Blocked || obs.History.Fingerprint != clean || !slices.Equal(pendingVersions(obs), []string{"0002", "0003"}) {
			t.Errorf("with the %s recorded: blocked %v (%s), fingerprint %s; want 0002, 0003 pending on the clean history",
				name, obs.Blocked, obs.Message, obs.History.Fingerprint)
		}
	}

	// A writer still alive may yet finish it: not dirty (its lease keeps
	// everything else out meanwhile).
	live := f.session(f.conn)
	f.setRunWriter("op-d", live)
	if obs := f.observe(api.PtahMigrationStatus{}); obs.Blocked {
		t.Errorf("with the run's writer alive: blocked (%s); a run that may still write is not dirty", obs.Message)
	}
	f.setRunWriter("op-d", gone)
	if obs := f.observe(api.PtahMigrationStatus{}); obs.Reason != api.ReasonHistoryDirty {
		t.Fatalf("with the writer gone again: reason %s", obs.Reason)
	}

	// A later run was journaled: it started under inputs derived with the
	// lease held, which saw this one settled.
	f.journalRun("op-later", gone)
	if _, err := f.conn.Exec(f.ctx, "UPDATE ptah.runs SET finished_at = clock_timestamp(), outcome = 'succeeded' WHERE operation_id = 'op-later'"); err != nil {
		t.Fatal(err)
	}
	if obs := f.observe(api.PtahMigrationStatus{}); obs.Blocked {
		t.Errorf("with a later run journaled: blocked (%s)", obs.Message)
	}
	if _, err := f.conn.Exec(f.ctx, "DELETE FROM ptah.runs WHERE operation_id = 'op-later'"); err != nil {
		t.Fatal(err)
	}

	// A person marked a version of it applied: resolve-run settled it.
	marked := f.row("0002")
	marked.OperationID = "op-d"
	f.record(marked)
	if obs := f.observe(api.PtahMigrationStatus{}); obs.Blocked || !slices.Equal(pendingVersions(obs), []string{"0003"}) {
		t.Errorf("with a version of the run marked applied: blocked %v (%s), pending %v", obs.Blocked, obs.Message, pendingVersions(obs))
	}
}

func (f *migFixture) setRunWriter(op string, s postgres.Session) {
	f.t.Helper()
	_, err := f.conn.Exec(f.ctx, "UPDATE ptah.runs SET writer_pid = $2, writer_backend_start = $3 WHERE operation_id = $1", op, s.PID, s.BackendStart)
	if err != nil {
		f.t.Fatal(err)
	}
}

// TestObserveMigrationOfAnUnreadableSourceBlocks: a source that could not
// be read blocks with SourceInvalid and its error, and the history is
// read all the same.
func TestObserveMigrationOfAnUnreadableSourceBlocks(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	f.record(f.row("0001"))
	f.res.Source, f.res.SourceErr = nil, errors.New("0002_posts.sql: duplicate version")
	obs := f.observe(api.PtahMigrationStatus{})
	if !obs.Blocked || obs.Reason != api.ReasonSourceInvalid || !strings.Contains(obs.Message, "duplicate version") ||
		obs.History.Applied != 1 || obs.Bindings.ArtifactDigest != "" {
		t.Fatalf("observation %+v", obs)
	}
	if _, err := migrationExecPlan(f.res, api.PtahMigrationPlanSpec{}, ""); err == nil || !strings.Contains(err.Error(), "duplicate version") {
		t.Errorf("migrationExecPlan without a source = %v", err)
	}
}

// TestMigrationExecPlanRunsEachFileAndRecordsItsHistory: the plan of the
// pending versions runs the transactional file in a transaction and the
// no-transaction file (CREATE INDEX CONCURRENTLY) statement by statement,
// records each version as run, with its checksum, operation and
// approver, and the next reading is up to date.
func TestMigrationExecPlanRunsEachFileAndRecordsItsHistory(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	f.record(f.row("0001"))
	if _, err := f.conn.Exec(f.ctx, "CREATE TABLE public.users (id int PRIMARY KEY, email text)"); err != nil {
		t.Fatal(err)
	}
	spec := f.planSpec(f.observe(api.PtahMigrationStatus{}))
	plan, err := migrationExecPlan(f.res, spec, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Phases) != 2 || plan.Phases[0].NoTransaction || !plan.Phases[1].NoTransaction ||
		plan.Phases[0].Statements != 1 || plan.Phases[1].Statements != 2 || len(plan.Statements) != 3 ||
		plan.History.Resource != "PtahMigration/default/app" || plan.LockTimeout != 5*time.Second {
		t.Fatalf("plan: %d phases %+v, %d statements, history %+v, lock timeout %s", len(plan.Phases), plan.Phases, len(plan.Statements),
			plan.History, plan.LockTimeout)
	}
	if h := plan.Phases[1].History; h.Version != "0003" || h.Name != "index" || h.Checksum != f.file("0003").Checksum ||
		h.How != postgres.HowRun || h.AppliedBy != "alice" {
		t.Errorf("history row of 0003: %+v", h)
	}

	run, writer, runErr := f.execute("op-1", plan, nil)
	if runErr != nil {
		t.Fatalf("Execute: %v", runErr)
	}
	rows := f.history()
	if got := historyVersions(rows); !slices.Equal(got, []string{"0001:marked", "0002:run", "0003:run"}) {
		t.Fatalf("history %v", got)
	}
	for _, r := range rows[1:] {
		if r.Checksum != f.file(r.Version).Checksum || r.OperationID != "op-1" || r.AppliedBy != "alice" || r.Name != f.file(r.Version).Name {
			t.Errorf("history row %+v", r)
		}
	}
	var valid int
	if err := f.conn.QueryRow(f.ctx, `SELECT count(*) FROM pg_index WHERE indisvalid AND indexrelid IN ('public.users_email'::regclass, 'public.posts_user'::regclass)`).Scan(&valid); err != nil || valid != 2 {
		t.Errorf("valid concurrent indexes: %d, %v; want 2", valid, err)
	}
	for _, s := range run.Steps {
		if s.NoTransaction != (s.Version == "0003") {
			t.Errorf("journal step %d of %s: no-transaction %v", s.Step, s.Version, s.NoTransaction)
		}
	}
	got := classifyMigration(runErr, run, plan)
	if got.Result != engine.RunSucceeded || !slices.Equal(got.Versions, []string{"0002", "0003"}) || got.Writer == nil ||
		got.Writer.PID != writer.PID || !got.Writer.BackendStart.Equal(writer.BackendStart) {
		t.Errorf("classified %+v; want succeeded with 0002, 0003 by writer %v", got, writer)
	}
	obs := f.observe(api.PtahMigrationStatus{})
	if obs.Blocked || len(obs.Pending) != 0 || obs.History.Applied != 3 || obs.History.LastApplied != "0003" {
		t.Errorf("after the run: blocked %v (%s), pending %v, history %+v", obs.Blocked, obs.Message, pendingVersions(obs), obs.History)
	}

	// The operation again executes nothing; the journal, which records it
	// succeeded, is what says how the operation ended.
	run, _, again := f.execute("op-1", plan, nil)
	if !errors.Is(again, postgres.ErrAlreadyRun) {
		t.Fatalf("Execute again = %v; want ErrAlreadyRun", again)
	}
	if got := classifyMigration(again, run, plan); got.Result != engine.RunSucceeded || !slices.Equal(got.Versions, []string{"0002", "0003"}) {
		t.Errorf("classified with the journal %+v; want succeeded", got)
	}
	if got := classifyMigration(again, nil, plan); got.Result != engine.RunUncertain {
		t.Errorf("classified without the journal %+v; want uncertain", got)
	}
}

// TestMigrationExecPlanRefusesAPlanTheSourceDoesNotHold: a checksum not
// the file's, a version the source lacks, a transaction mode not the
// file's, a version twice, no versions, a bad lock timeout:
// each is refused by name, and every problem at once.
func TestMigrationExecPlanRefusesAPlanTheSourceDoesNotHold(t *testing.T) {
	t.Parallel()
	res := migResource(t, "", threeFiles)
	good := func() api.PtahMigrationPlanSpec {
		var vs []api.MigrationVersion
		for _, f := range res.Source.Files {
			vs = append(vs, api.MigrationVersion{Version: f.Version.String(), Name: f.Name, Checksum: f.Checksum, NoTransaction: f.NoTransaction})
		}
		return api.PtahMigrationPlanSpec{Versions: vs, LockTimeout: "5s"}
	}
	if _, err := migrationExecPlan(res, good(), ""); err != nil {
		t.Fatalf("the source's own plan: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*api.PtahMigrationPlanSpec)
		want   []string
	}{
		{"checksum", func(s *api.PtahMigrationPlanSpec) { s.Versions[1].Checksum = "sha256:other" },
			[]string{"version 0002: 0002_posts.sql has checksum " + res.Source.Files[1].Checksum, "plan was made from checksum sha256:other"}},
		{"missing", func(s *api.PtahMigrationPlanSpec) {
			s.Versions = append(s.Versions, api.MigrationVersion{Version: "0004", Name: "more", Checksum: "sha256:4"})
		}, []string{"version 0004 (more): the source has no file of this version"}},
		{"transaction mode", func(s *api.PtahMigrationPlanSpec) { s.Versions[2].NoTransaction = false },
			[]string{"version 0003: 0003_index.sql runs without a transaction, and the plan says in a transaction"}},
		{"twice", func(s *api.PtahMigrationPlanSpec) { s.Versions[1].Version = "1" },
			[]string{"version 1: named twice (also as 0001)"}},
		{"no versions", func(s *api.PtahMigrationPlanSpec) { s.Versions = nil }, []string{"names no version"}},
		{"lock timeout", func(s *api.PtahMigrationPlanSpec) { s.LockTimeout = "" }, []string{`lock timeout ""`}},
		{"all at once", func(s *api.PtahMigrationPlanSpec) {
			s.Versions[0].Checksum, s.LockTimeout = "sha256:x", "soon"
		}, []string{"version 0001: 0001_users.sql has checksum", `lock timeout "soon"`}},
	} {
		spec := good()
		tc.mutate(&spec)
		plan, err := migrationExecPlan(res, spec, "")
		if err == nil || plan != nil {
			t.Errorf("%s: plan %v, error nil; want a refusal", tc.name, plan)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to say %q", tc.name, err, w)
			}
		}
	}
}

// TestMigrationExecPlanRefusesWhenTheHistoryMoved: a version recorded
// between planning and execution makes the writer refuse before the
// first statement: the error names both fingerprints and the version,
// nothing of the plan runs, and the run is a failure with no version.
func TestMigrationExecPlanRefusesWhenTheHistoryMoved(t *testing.T) {
	t.Parallel()
	f := newMigFixture(t, threeFiles)
	spec := f.planSpec(f.observe(api.PtahMigrationStatus{}))
	plan, err := migrationExecPlan(f.res, spec, "alice")
	if err != nil {
		t.Fatal(err)
	}
	moved := f.row("0001")
	moved.AppliedBy, moved.OperationID = "bob", "op-bob"
	f.record(moved)
	now := migrate.HistoryFingerprint(appliedRows(f.history()), "")

	run, _, runErr := f.execute("op-1", plan, nil)
	if !errors.Is(runErr, postgres.ErrNotStarted) || !errors.Is(runErr, postgres.ErrHistoryMoved) {
		t.Fatalf("Execute = %v; want ErrNotStarted and ErrHistoryMoved", runErr)
	}
	for _, w := range []string{spec.HistoryFingerprint, now, "version 0001 was recorded since (marked, by bob, operation op-bob)"} {
		if !strings.Contains(runErr.Error(), w) {
			t.Errorf("Execute = %v\nwant it to say %q", runErr, w)
		}
	}
	if f.exists("public.users") || len(run.Steps) != 0 || !slices.Equal(historyVersions(f.history()), []string{"0001:marked"}) {
		t.Errorf("something ran: users table %v, journal steps %d, history %v", f.exists("public.users"), len(run.Steps), historyVersions(f.history()))
	}
	if got := classifyMigration(runErr, run, plan); got.Result != engine.RunFailed || len(got.Versions) != 0 || got.Failure != nil {
		t.Errorf("classified %+v; want failed, no version", got)
	}

	// The same plan against the history it was selected against runs.
	if _, err := f.conn.Exec(f.ctx, "DELETE FROM ptah.migration_history"); err != nil {
		t.Fatal(err)
	}
	if _, _, runErr := f.execute("op-2", plan, nil); runErr != nil {
		t.Fatalf("Execute on the expected history: %v", runErr)
	}
}

// TestClassifyMigrationFromRealRuns classifies what Execute and the
// journal report for runs that end each way.
func TestClassifyMigrationFromRealRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		// during, when set, acts on the database while the run runs: it
		// hears each statement's progress (f.conn is its own session).
		during func(f *migFixture) postgres.ProgressFunc
		// kill, when set, ends the writer's session once it runs a
		// statement containing it.
		kill string
		want engine.MigrationRun
		// errIs is what Execute's error must be.
		errIs error
	}{
		{
			name: "transactional file fails after one committed",
			files: map[string]string{
				"0001_a.sql": "CREATE TABLE public.a (id int);\n",
				"0002_b.sql": "CREATE TABLE public.b (id int);\nINSERT INTO public.missing VALUES (1);\n",
			},
			errIs: postgres.ErrPartiallyApplied,
			want:  engine.MigrationRun{Result: engine.RunFailed, Versions: []string{"0001"}, Failure: &api.RunFailure{Version: "0002", Statement: 2}},
		},
		{
			name: "first transactional file fails",
			files: map[string]string{
				"0001_a.sql": "CREATE TABLE public.a (id int);\nCREATE TABLE public.b (id int);\nSELECT 1/0;\n",
				"0002_b.sql": "CREATE TABLE public.c (id int);\n",
			},
			errIs: postgres.ErrPlanFailed,
			want:  engine.MigrationRun{Result: engine.RunFailed, Failure: &api.RunFailure{Version: "0001", Statement: 3}},
		},
		{
			name: "no-transaction file fails at its second statement",
			files: map[string]string{
				"0001_a.sql": "CREATE TABLE public.a (id int);\n",
				"0002_b.sql": "-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY a_id ON public.a (id);\nSELECT 1/0;\nCREATE TABLE public.c (id int);\n",
			},
			errIs: postgres.ErrPartiallyApplied,
			want:  engine.MigrationRun{Result: engine.RunUncertain, Partial: true, Versions: []string{"0001"}},
		},
		{
			name: "no-transaction file refused at its first statement",
			files: map[string]string{
				"0001_a.sql": "CREATE TABLE public.a (id int);\n",
				"0002_b.sql": "-- ptah:no-transaction\nSELECT 1/0;\nCREATE INDEX CONCURRENTLY a_id ON public.a (id);\n",
			},
			errIs: postgres.ErrPartiallyApplied,
			want:  engine.MigrationRun{Result: engine.RunFailed, Versions: []string{"0001"}, Failure: &api.RunFailure{Version: "0002", Statement: 1}},
		},
		{
			name: "session lost while a no-transaction statement ran",
			files: map[string]string{
				"0001_a.sql": "CREATE TABLE public.a (id int);\n",
				"0002_b.sql": "-- ptah:no-transaction\nCREATE INDEX CONCURRENTLY a_id ON public.a (id);\nSELECT 'ptah-test-hang', pg_sleep(3600);\n",
			},
			kill:  "ptah-test-hang",
			errIs: postgres.ErrOutcomeUnknown,
			want:  engine.MigrationRun{Result: engine.RunUncertain, Partial: true, Versions: []string{"0001"}},
		},
		{
			name: "session lost in the first statement",
			files: map[string]string{
				"0001_a.sql": "-- ptah:no-transaction\nSELECT 'ptah-test-hang', pg_sleep(3600);\n",
			},
			kill:  "ptah-test-hang",
			errIs: postgres.ErrOutcomeUnknown,
			want:  engine.MigrationRun{Result: engine.RunUncertain},
		},
		{
			name: "lease lost between a no-transaction file and the next",
			files: map[string]string{
				"0001_a.sql": "-- ptah:no-transaction\nCREATE TABLE public.a (id int);\n",
				"0002_b.sql": "CREATE TABLE public.b (id int);\n",
			},
			during: func(f *migFixture) postgres.ProgressFunc {
				return func(s postgres.Step) {
					if s.Version == "0001" && s.Done {
						if _, err := f.conn.Exec(f.ctx, "DELETE FROM ptah.leases"); err != nil {
							f.t.Error(err)
						}
					}
				}
			},
			errIs: postgres.ErrLeaseLost,
			want:  engine.MigrationRun{Result: engine.RunFailed, Versions: []string{"0001"}, Failure: &api.RunFailure{Version: "0002"}},
		},
		{
			name: "a no-transaction file's completion cannot be recorded",
			files: map[string]string{
				"0001_a.sql": "CREATE TABLE public.a (id int);\n",
				"0002_b.sql": "-- ptah:no-transaction\nCREATE TABLE public.b (id int);\nCREATE TABLE public.c (id int);\n",
				"0003_d.sql": "CREATE TABLE public.d (id int);\n",
			},
			// A person marks 0002 while its last statement runs: its
			// statements commit, its history row is refused, and the
			// journal then reads as if 0003 had failed to begin.
			during: func(f *migFixture) postgres.ProgressFunc {
				return func(s postgres.Step) {
					if s.Version == "0002" && s.N == 3 && !s.Done {
						f.record(f.row("0002"))
					}
				}
			},
			errIs: postgres.ErrHistoryExists,
			want:  engine.MigrationRun{Result: engine.RunUncertain, Partial: true, Versions: []string{"0001", "0002"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newMigFixture(t, tc.files)
			plan, err := migrationExecPlan(f.res, f.planSpec(f.observe(api.PtahMigrationStatus{})), "")
			if err != nil {
				t.Fatal(err)
			}
			var progress postgres.ProgressFunc
			if tc.during != nil {
				progress = tc.during(f)
			}
			w, err := postgres.OpenWriter(f.ctx, f.url, MigrationCoordinationDigest(f.res.Migration.Spec, f.identity), "op-1",
				f.res.storeResource(), time.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			pid := w.Session().PID
			killed := make(chan error, 1)
			killCtx, stopKilling := context.WithCancel(f.ctx)
			defer stopKilling()
			if tc.kill != "" {
				observer := migDial(t, f.ctx, f.url)
				go func() { killed <- killWhenRunning(killCtx, observer, pid, tc.kill) }()
			}
			runErr := w.Execute(f.ctx, "plan-1", plan, progress)
			stopKilling()
			if tc.kill != "" {
				if err := <-killed; err != nil {
					t.Fatalf("the writer was not killed running %q: %v (Execute: %v)", tc.kill, err, runErr)
				}
			}
			_ = w.Release(f.ctx)
			if !errors.Is(runErr, tc.errIs) {
				t.Fatalf("Execute = %v; want %v", runErr, tc.errIs)
			}
			if tc.kill != "" {
				// The journal is read once the writer can no longer write.
				if _, err := f.conn.Exec(f.ctx, "SELECT pg_terminate_backend($1, 30000)", pid); err != nil {
					t.Fatal(err)
				}
			}
			run, err := postgres.ReadRun(f.ctx, f.conn, "op-1")
			if err != nil {
				t.Fatal(err)
			}
			got := classifyMigration(runErr, run, plan)
			if got.Result != tc.want.Result || got.Partial != tc.want.Partial || !slices.Equal(got.Versions, tc.want.Versions) ||
				!equalFailure(got.Failure, tc.want.Failure) || got.Message != statusMessage(runErr) || strings.Contains(got.Message, "\n") ||
				got.Writer == nil || got.Writer.PID != pid {
				t.Errorf("classified %+v (failure %+v)\nwant     %+v (failure %+v)", got, got.Failure, tc.want, tc.want.Failure)
			}
			// What a failed run says committed is what history holds.
			if got.Result == engine.RunFailed {
				var hist []string
				for _, r := range f.history() {
					hist = append(hist, r.Version)
				}
				if !slices.Equal(hist, got.Versions) {
					t.Errorf("history %v, and the failed run says %v committed", hist, got.Versions)
				}
			}
		})
	}
}

func equalFailure(a, b *api.RunFailure) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// killWhenRunning terminates session pid once it runs a query containing
// what.
func killWhenRunning(ctx context.Context, conn *pgx.Conn, pid int32, what string) error {
	for {
		a, err := postgres.PIDActivity(ctx, conn, uint32(pid))
		if err != nil {
			return err
		}
		if a != nil && a.State == "active" && strings.Contains(a.Query, what) {
			// The caller stops waiting once the writer returns, which
			// this very call makes it do.
			_, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_terminate_backend($1)", pid)
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestClassifyMigrationWithoutTheJournal: the decisions that need no
// journal are taken from the error alone, and those that need it are
// uncertain without it.
func TestClassifyMigrationWithoutTheJournal(t *testing.T) {
	t.Parallel()
	plan := &postgres.Plan{Statements: make([]postgres.Statement, 4), Phases: []postgres.Phase{
		{Statements: 1, History: &postgres.HistoryRow{Version: "1"}},
		{Statements: 2, NoTransaction: true, History: &postgres.HistoryRow{Version: "2"}},
		{Statements: 1, History: &postgres.HistoryRow{Version: "3"}},
	}}
	cause := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want engine.MigrationRun
	}{
		{"succeeded", nil, engine.MigrationRun{Result: engine.RunSucceeded, Versions: []string{"1", "2", "3"}}},
		{"not started", postgres.ErrNotStarted, engine.MigrationRun{Result: engine.RunFailed}},
		{"statement of the last file", &postgres.StatementError{Step: 4, Total: 4, Phase: 3, Phases: 3, Committed: 3, Err: cause},
			engine.MigrationRun{Result: engine.RunFailed, Versions: []string{"1", "2"}, Failure: &api.RunFailure{Version: "3", Statement: 1}}},
		{"second statement of a no-transaction file", &postgres.StatementError{Step: 3, Total: 4, Phase: 2, Phases: 3, Committed: 2,
			NoTransaction: true, Err: cause}, engine.MigrationRun{Result: engine.RunUncertain, Partial: true}},
		{"a statement the plan lacks", &postgres.StatementError{Step: 9, Total: 9, Phase: 3, Phases: 3, Committed: 3, Err: cause},
			engine.MigrationRun{Result: engine.RunUncertain, Partial: true}},
		{"failed around the statements", postgres.ErrPlanFailed, engine.MigrationRun{Result: engine.RunFailed, Failure: &api.RunFailure{Version: "1"}}},
		{"partially applied", postgres.ErrPartiallyApplied, engine.MigrationRun{Result: engine.RunUncertain, Partial: true}},
		{"outcome unknown", postgres.ErrOutcomeUnknown, engine.MigrationRun{Result: engine.RunUncertain}},
		{"already run", postgres.ErrAlreadyRun, engine.MigrationRun{Result: engine.RunUncertain}},
	} {
		got := classifyMigration(tc.err, nil, plan)
		if got.Result != tc.want.Result || got.Partial != tc.want.Partial || !slices.Equal(got.Versions, tc.want.Versions) ||
			!equalFailure(got.Failure, tc.want.Failure) || got.Writer != nil {
			t.Errorf("%s: classified %+v (failure %+v); want %+v (failure %+v)", tc.name, got, got.Failure, tc.want, tc.want.Failure)
		}
	}
}
