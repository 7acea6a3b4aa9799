package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
	api "github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// initOptions is everything ptah init needs, validated before any I/O.
type initOptions struct {
	File    string // the ptah.yaml to write
	Dir     string // the declared directory, relative to File's directory
	Kind    string
	Name    string
	Schemas []string // empty: every schema ptah may manage
	// FromURL is the source database's URL; URLEnv the variable the
	// written ptah.yaml names for it.
	FromURL string
	URLEnv  string
	DevURL  string
	Force   bool
	Output  string
}

var initOutputs = []string{outputText, outputJSON}

const initLong = `Start managing an existing database: write a ptah.yaml and the declared
SQL files from the live database's catalog, then prove them.

The files are written by the engine that computes plans: ptah reads the
database's managed schemas as a plan reads a target, and writes the plan
that builds them from an empty database, cut into one file per schema and
kind of object (010_billing_schema.sql, 020_public_types.sql, ...), named so
that their lexical order is the order they load in. Owners, grants and
session settings are not written: ptah does not manage them (see ptah plan
--help). Objects ptah does not manage (rules, foreign tables, statistics
objects, ...) are refused by name, exit 7, and nothing is written: move them
out of the managed schemas, or leave those schemas out with --schemas.

Before it finishes, init proves what it wrote: it loads the files, read
back through the ptah.yaml it wrote, into a temporary dev database and
plans against the source database, as ptah plan would; only a plan with no
changes lets the files into place (files that do not load, usually over an
object of a schema --schemas leaves out: exit 6; a plan with changes, a bug
of init: exit 1). Until then they are in a temporary
directory beside ptah.yaml, removed on any failure: init writes everything
or nothing.

The source database's URL comes from --from (PTAH_FROM), or from the
environment variable --from-env names. It is never written: the ptah.yaml
reads it from the environment variable --url-env names (default: the
--from-env variable, else APP_DATABASE_URL for --name app), which must hold
it when ptah plan runs.

--kind PtahMigration writes a migration directory instead (default
migrations/) whose one file, 1_baseline.sql, is the whole schema, proved the
same way. The database it was read from already has that schema: adopt it
there with ptah plan PtahMigration/NAME --baseline 1, and write later
changes as new files.

init refuses to overwrite an existing ptah.yaml or a declared directory
that is not empty; --force replaces them (the directory whole).

Environment: PTAH_FROM, PTAH_FILE, PTAH_DEV_URL, PTAH_OUTPUT stand for the
flags.

`

const initExample = `  # Declare the schemas of a running database (the URL is read from the variable)
  export APP_DATABASE_URL='postgres://app@db.internal:5432/app'
  ptah init --from-env APP_DATABASE_URL
  ptah plan        # no changes

  # Only two schemas, files under db/
  ptah init --from-env APP_DATABASE_URL --schemas billing,public --dir db

  # A migration directory whose first file is the current schema
  ptah init --from-env APP_DATABASE_URL --kind PtahMigration
  ptah plan PtahMigration/app --baseline 1`

func (a *app) newInitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "init --from URL | --from-env VAR [flags]",
		Short:   "Write ptah.yaml and the declared SQL files from an existing database, and prove them",
		Long:    initLong + exitCodeHelp("init"),
		Example: initExample,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := a.initOptions()
			if err != nil {
				return err
			}
			return a.runInit(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.String("from", "", "the URL of the database to read (prefer --from-env: a command line is visible to other users of the machine)")
	f.String("from-env", "", "the environment variable holding the URL of the database to read")
	f.String("url-env", "", "the environment variable the written ptah.yaml reads the URL from (default: --from-env's, else NAME_DATABASE_URL)")
	f.StringP("file", "f", "ptah.yaml", "the ptah.yaml to write")
	f.String("dir", "", "the directory of declared files to write, relative to the ptah.yaml (default: schema, or migrations with --kind PtahMigration)")
	f.String("kind", api.KindPtahSchema, "the resource to write: "+api.KindPtahSchema+" or "+api.KindPtahMigration)
	f.String("name", "app", "the resource's metadata.name")
	f.StringSlice("schemas", nil, "the schemas to manage, comma-separated (default: every schema but the system ones, ptah's and those of extensions)")
	f.String("dev-url", "", "a server (any database on it) where the temporary dev databases are created; default: the source's server")
	f.Bool("force", false, "overwrite an existing ptah.yaml and replace the declared directory")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(initOutputs, ", "))
	return cmd
}

var placeholderEnv = regexp.MustCompile(`[^A-Z0-9_]+`)

// initOptions resolves and validates the options; it does no I/O but
// looking at what exists where it would write.
func (a *app) initOptions() (initOptions, error) {
	s := a.settings
	o := initOptions{
		File: s.String("file"), Dir: s.String("dir"), Kind: s.String("kind"), Name: s.String("name"),
		Schemas: s.StringSlice("schemas"), FromURL: s.String("from"), URLEnv: s.String("url-env"),
		DevURL: s.String("dev-url"), Output: s.String("output"),
	}
	var err error
	if o.Force, err = s.Bool("force"); err != nil {
		return o, err
	}
	a.secrets.addURL(o.FromURL)
	a.secrets.addURL(o.DevURL)
	fromEnv := s.String("from-env")
	switch {
	case o.FromURL != "" && fromEnv != "":
		return o, usageErrorf("--from and --from-env both name the source database; give one")
	case o.FromURL == "" && fromEnv == "":
		return o, usageErrorf("name the database to read: --from-env VAR (the variable holding its URL), or --from URL")
	case fromEnv != "":
		o.FromURL = strings.TrimSpace(os.Getenv(fromEnv))
		if o.FromURL == "" {
			return o, usageErrorf("--from-env: environment variable %s is not set or empty; it must hold the URL of the database to read", fromEnv)
		}
		a.secrets.addURL(o.FromURL)
		if o.URLEnv == "" {
			o.URLEnv = fromEnv
		}
	}
	if err := postgres.CheckURL(o.FromURL); err != nil {
		return o, usageErrorf("%s: not a PostgreSQL connection URL: %v", s.origin("from"), err)
	}
	if o.URLEnv == "" {
		o.URLEnv = placeholderEnv.ReplaceAllString(strings.ToUpper(o.Name), "_") + "_DATABASE_URL"
	}
	switch o.Kind {
	case api.KindPtahSchema:
		if o.Dir == "" {
			o.Dir = "schema"
		}
	case api.KindPtahMigration:
		if o.Dir == "" {
			o.Dir = "migrations"
		}
		if len(o.Schemas) > 0 {
			return o, usageErrorf("--schemas: a %s's baseline covers every schema of the database (ptah plan --baseline compares them all); leave --schemas out",
				api.KindPtahMigration)
		}
	default:
		return o, usageErrorf("%s: %q is not %s or %s", s.origin("kind"), o.Kind, api.KindPtahSchema, api.KindPtahMigration)
	}
	if filepath.IsAbs(o.Dir) || o.Dir == "." || strings.HasPrefix(filepath.Clean(o.Dir), "..") {
		return o, usageErrorf("%s: %q must be a directory below the ptah.yaml's, named relative to it", s.origin("dir"), o.Dir)
	}
	if err := validateCommon(s, o.File, o.Output, initOutputs, nil, o.DevURL); err != nil {
		return o, err
	}
	// The resource as it will be written, with the schemas to come, must
	// read as ptah.yaml: the name, the variable and the schemas are
	// checked by the code that will read them.
	probe := o.Schemas
	if len(probe) == 0 {
		probe = []string{"public"}
	}
	if _, err := config.Parse(o.File, []byte(o.yaml(probe))); err != nil {
		return o, usageErrorf("the flags do not make a valid resource: %v", err)
	}
	if !o.Force {
		if err := refuseOverwrite(o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// refuseOverwrite: init writes nothing over an existing ptah.yaml or into
// a declared directory that holds anything, unless --force.
func refuseOverwrite(o initOptions) error {
	var there []string
	if _, err := os.Lstat(o.File); err == nil {
		there = append(there, o.File)
	}
	dir := o.dirPath()
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		there = append(there, dir+string(filepath.Separator))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		there = append(there, dir)
	}
	if len(there) > 0 {
		return usageErrorf("%s already exist(s); ptah init writes nothing over existing files: move them away, or pass --force to replace them",
			strings.Join(there, " and "))
	}
	return nil
}

func (o initOptions) dirPath() string { return filepath.Join(filepath.Dir(o.File), o.Dir) }

// yaml is the ptah.yaml init writes.
func (o initOptions) yaml(schemas []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by ptah init. The target's URL is read from the environment\n")
	fmt.Fprintf(&b, "# variable %s; README.md describes every field.\n", o.URLEnv)
	fmt.Fprintf(&b, "apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\nspec:\n", api.GroupVersion.String(), o.Kind, yamlScalar(o.Name))
	fmt.Fprintf(&b, "  target:\n    urlFrom: {env: %s}\n", yamlScalar(o.URLEnv))
	fmt.Fprintf(&b, "  source:\n    path: %s\n", yamlScalar("./"+filepath.ToSlash(filepath.Clean(o.Dir))))
	if o.Kind == api.KindPtahSchema {
		quoted := make([]string, len(schemas))
		for i, s := range schemas {
			quoted[i] = yamlScalar(s)
		}
		fmt.Fprintf(&b, "  schemas: [%s]\n", strings.Join(quoted, ", "))
	}
	return b.String()
}

// yamlScalar is s as a YAML scalar, quoted when it needs to be.
func yamlScalar(s string) string {
	out, err := yaml.Marshal(s)
	if err != nil {
		return fmt.Sprintf("%q", s)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// initFile is one file init writes, by its name in the declared directory.
type initFile struct {
	Name       string `json:"name"`
	Statements int    `json:"statements"`
	sql        string
}

// initResult is what init did, for rendering.
type initResult struct {
	File      string     `json:"file"`
	Kind      string     `json:"kind"`
	Name      string     `json:"name"`
	Dir       string     `json:"dir"`
	URLEnv    string     `json:"urlEnv"`
	Schemas   []string   `json:"schemas"`
	Files     []initFile `json:"files"`
	Verified  bool       `json:"verified"`
	NextSteps []string   `json:"next"`
}

func (a *app) runInit(ctx context.Context, o initOptions) error {
	conn, err := postgres.Connect(ctx, o.FromURL)
	if err != nil {
		return fmt.Errorf("connecting to the database to read: %w", err)
	}
	defer conn.Close(context.Background())
	schemas := o.Schemas
	if len(schemas) == 0 {
		if schemas, err = catalog.ManageableSchemas(ctx, conn); err != nil {
			return err
		}
		if len(schemas) == 0 {
			return fmt.Errorf("%w: the database has no schema ptah may manage; name one with --schemas", config.ErrInvalid)
		}
	}
	// The resource again, with the schemas found: a schema ptah refuses
	// to manage is refused here, before anything is read.
	if _, err := config.Parse(o.File, []byte(o.yaml(schemas))); err != nil {
		return fmt.Errorf("the database's schemas do not make a valid resource (choose them with --schemas): %w", err)
	}
	live, err := catalog.Inspect(ctx, conn, schemas)
	if err != nil {
		var u *catalog.UnsupportedError
		if errors.As(err, &u) {
			u.Where = "source database"
		}
		return fmt.Errorf("reading schemas %s of the database (--schemas chooses them): %w", strings.Join(schemas, ", "), err)
	}
	devServer := o.DevURL
	if devServer == "" {
		devServer = o.FromURL
	}
	// What a new database holds of the managed schemas (its public
	// schema), which the script takes as given.
	empty, err := catalog.LoadDesired(ctx, devServer, nil, schemas)
	if err != nil {
		return fmt.Errorf("reading what an empty database holds: %w", err)
	}
	script, err := catalog.CreationScript(empty, live)
	if err != nil {
		return fmt.Errorf("writing the schema as SQL: %w", err)
	}
	if len(script) == 0 {
		return fmt.Errorf("%w: schemas %s hold nothing to declare; ptah needs at least one .sql file: name the schemas to manage with --schemas",
			config.ErrInvalid, strings.Join(schemas, ", "))
	}
	files := initFiles(o.Kind, script)
	res := initResult{File: o.File, Kind: o.Kind, Name: o.Name, Dir: o.Dir, URLEnv: o.URLEnv, Schemas: schemas, Files: files}

	stage, err := os.MkdirTemp(filepath.Dir(o.File), ".ptah-init-")
	if err != nil {
		return fmt.Errorf("creating a temporary directory beside %s: %w", o.File, err)
	}
	defer os.RemoveAll(stage)
	staged := o
	staged.File = filepath.Join(stage, filepath.Base(o.File))
	if err := writeStaged(staged, schemas, files); err != nil {
		return err
	}
	if err := a.verifyInit(ctx, staged, o.FromURL, schemas); err != nil {
		return err
	}
	res.Verified = true
	if err := moveIntoPlace(staged, o, stage); err != nil {
		return err
	}
	res.NextSteps = []string{"export " + o.URLEnv + "=<the database's URL>", "ptah plan"}
	if o.Kind == api.KindPtahMigration {
		res.NextSteps[1] = "ptah plan " + api.KindPtahMigration + "/" + o.Name + " --baseline 1"
	}
	return a.renderInit(o.Output, res)
}

// initFiles names the script's files: for a PtahSchema one per schema and
// kind, numbered in tens in load order; for a PtahMigration one baseline.
func initFiles(kind string, script []catalog.ScriptFile) []initFile {
	if kind == api.KindPtahMigration {
		var b strings.Builder
		n := 0
		for i, f := range script {
			if i > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "-- %s: %s\n", f.Schema, f.Kind)
			b.WriteString(f.SQL())
			n += len(f.Statements)
		}
		return []initFile{{Name: "1_baseline.sql", Statements: n, sql: b.String()}}
	}
	width := len(fmt.Sprint(len(script) * 10))
	if width < 3 {
		width = 3
	}
	files := make([]initFile, len(script))
	for i, f := range script {
		name := fmt.Sprintf("%0*d_%s_%s.sql", width, (i+1)*10, fileWord(f.Schema), f.Kind)
		files[i] = initFile{Name: name, Statements: len(f.Statements), sql: f.SQL()}
	}
	return files
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// fileWord is a schema's name as a part of a file name.
func fileWord(s string) string {
	if w := unsafeFileChars.ReplaceAllString(s, "_"); w != "" {
		return w
	}
	return "_"
}

// writeStaged writes ptah.yaml and the declared directory where o says.
func writeStaged(o initOptions, schemas []string, files []initFile) error {
	dir := o.dirPath()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(f.sql), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", f.Name, err)
		}
	}
	if err := os.WriteFile(o.File, []byte(o.yaml(schemas)), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", o.File, err)
	}
	return nil
}

// errInitUnproved: the files init wrote do not rebuild the database they
// were read from. It is ptah's failure, not the user's.
var errInitUnproved = errors.New("the files ptah init wrote do not rebuild the database they were read from")

// verifyInit reads the staged ptah.yaml with the code every command reads
// it with, loads its declared files into a dev database and plans against
// the source: the plan must be empty.
func (a *app) verifyInit(ctx context.Context, staged initOptions, fromURL string, schemas []string) error {
	f, err := config.Load(staged.File)
	if err != nil {
		return fmt.Errorf("reading the ptah.yaml it wrote: %w", err)
	}
	r := f.Documents[0]
	getenv := func(name string) string {
		if name == staged.URLEnv {
			return fromURL
		}
		return ""
	}
	target, _, err := r.ResolveURL(getenv, postgres.CheckURL)
	if err != nil {
		return fmt.Errorf("reading the ptah.yaml it wrote: %w", err)
	}
	req := catalog.PlanRequest{TargetURL: target, DevURL: staged.DevURL}
	if r.Schema != nil {
		sqlFiles, err := r.SQLFiles()
		if err != nil {
			return err
		}
		for _, sf := range sqlFiles {
			req.Files = append(req.Files, catalog.SourceFile{Name: filepath.Join(staged.Dir, filepath.Base(sf.Name)), SQL: sf.SQL})
		}
		req.Schemas = r.Schema.Spec.Schemas
	} else {
		src, err := readSource(r)
		if err != nil {
			return err
		}
		for _, mf := range src.Files {
			req.Files = append(req.Files, catalog.SourceFile{Name: filepath.Join(staged.Dir, mf.Name), SQL: mf.SQL})
		}
		req.Schemas = schemas
	}
	plan, err := a.planSchema(ctx, req)
	if errors.Is(err, catalog.ErrLoad) {
		return fmt.Errorf("%w: they do not load into an empty database, nothing was written: %w", errInitUnproved, err)
	}
	if err != nil {
		return fmt.Errorf("proving the files: %w", err)
	}
	if n := len(plan.Statements); n > 0 {
		var b strings.Builder
		for i, s := range plan.Statements {
			if i == 5 {
				fmt.Fprintf(&b, "\n  ... and %d more", n-5)
				break
			}
			fmt.Fprintf(&b, "\n  %s", strings.ReplaceAll(s.SQL, "\n", "\n  "))
		}
		return fmt.Errorf("%w: a plan against it has %d change(s), nothing was written:%s", errInitUnproved, n, b.String())
	}
	return nil
}

// moveIntoPlace renames the staged directory and ptah.yaml to where they
// belong. With --force, what was there is moved into the stage first (and
// removed with it).
func moveIntoPlace(staged, o initOptions, stage string) error {
	from, to := staged.dirPath(), o.dirPath()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(to), err)
	}
	if o.Force {
		if err := os.Rename(to, filepath.Join(stage, ".replaced-dir")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("moving the old %s away: %w", to, err)
		}
	} else if err := os.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// An empty directory is replaced; anything else was refused before.
		return fmt.Errorf("replacing %s: %w", to, err)
	}
	if err := os.Rename(from, to); err != nil {
		return fmt.Errorf("moving the declared files into %s: %w", to, err)
	}
	if err := os.Rename(staged.File, o.File); err != nil {
		return fmt.Errorf("moving %s into place (the declared files are in %s already): %w", o.File, to, err)
	}
	return nil
}

func (a *app) renderInit(output string, r initResult) error {
	if output == outputJSON {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	w := a.stdout
	fmt.Fprintf(w, "Wrote %s (%s %q, schemas: %s) and %s/:\n", r.File, r.Kind, r.Name, strings.Join(r.Schemas, ", "), filepath.ToSlash(filepath.Clean(r.Dir)))
	for _, f := range r.Files {
		fmt.Fprintf(w, "  %s (%s)\n", f.Name, plural(f.Statements, "statement"))
	}
	fmt.Fprintf(w, "Checked: the files load into an empty dev database, and a plan against the database they were read from has no changes.\n")
	fmt.Fprintf(w, "The URL is not in any file: %s reads it from the environment variable %s.\n", r.File, r.URLEnv)
	fmt.Fprintf(w, "Next: %s\n", strings.Join(r.NextSteps, "; "))
	return nil
}
