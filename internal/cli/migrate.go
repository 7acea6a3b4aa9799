package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/config"
	"github.com/ptah-run/ptah/internal/migrate"
)

const migrateLong = `Work on the versioned files of the PtahMigration resources in the file.

`

const migrateHashLong = `Write the integrity file ptah.sum of each PtahMigration's source directory
(all of them, or those named): a checksum of every versioned file, in
version order, and a total over them. With ptah.sum in place, a file edited,
added, removed, renamed or reordered since is an error before anything
runs, naming each file that differs; run ptah migrate hash again once the
change is meant, and commit ptah.sum with the files.

The directory is read as a plan reads it (spec.source.layout, or the layout
its file names show): a directory ptah cannot read as a sequence (file
names that fit no layout or several, duplicate versions, a file with no
statement) is refused, and ptah.sum is left as it was.

`

type migrateHashOptions struct {
	File   string
	Names  []string
	Output string
}

// hashed is one directory migrate hash wrote the sum of.
type hashed struct {
	Resource string `json:"resource"`
	Dir      string `json:"dir"`
	Sum      string `json:"sum"`
	Files    int    `json:"files"`
	Total    string `json:"total"`
}

func (a *app) newMigrateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Work on the versioned files of PtahMigration resources",
		Long:  migrateLong + exitCodeHelp("migrate"),
		Args:  noArgs,
	}
	hash := &cobra.Command{
		Use:               "hash [NAME...] [flags]",
		Short:             "Write ptah.sum, the checksums of a migration's files",
		Long:              migrateHashLong + exitCodeHelp("migrate"),
		Example:           "  ptah migrate hash\n  ptah migrate hash app -o json",
		Args:              cobra.ArbitraryArgs,
		ValidArgsFunction: a.completeDeclared,
		RunE: func(cmd *cobra.Command, args []string) error {
			s := a.settings
			o := migrateHashOptions{File: s.String("file"), Names: args, Output: s.String("output")}
			if err := validateCommon(s, o.File, o.Output, statusOutputs, o.Names, ""); err != nil {
				return err
			}
			return a.runMigrateHash(o)
		},
	}
	f := hash.Flags()
	f.StringP("file", "f", "ptah.yaml", "the file of resource documents")
	f.StringP("output", "o", outputText, "output format: "+strings.Join(statusOutputs, ", "))
	cmd.AddCommand(hash)
	return cmd
}

func (a *app) runMigrateHash(o migrateHashOptions) error {
	file, err := config.Load(o.File)
	if err != nil {
		return err
	}
	resources, err := file.SelectMigrations(o.Names)
	if err != nil {
		return err
	}
	// Every directory is read before any sum is written: one that does not
	// read leaves every ptah.sum as it was.
	sources := make([]*migrate.Source, len(resources))
	for i, r := range resources {
		if sources[i], err = readSource(r); err != nil && !sumMismatch(err) {
			return err
		}
	}
	var out []hashed
	for _, r := range resources {
		src, err := migrate.WriteSum(r.SourceDir(), layoutOf(r))
		if err != nil {
			return fmt.Errorf("%s: writing %s: %w", r.Ref(), migrate.SumFile, err)
		}
		out = append(out, hashed{Resource: r.Ref(), Dir: r.SourceDir(), Sum: r.SourceDir() + "/" + migrate.SumFile,
			Files: len(src.Files), Total: src.Digest()})
	}
	if o.Output == outputJSON {
		return writeJSON(a.stdout, map[string]any{"items": out})
	}
	for _, h := range out {
		fmt.Fprintf(a.stdout, "%s: wrote %s (%d files, total %s)\n", h.Resource, h.Sum, h.Files, h.Total)
	}
	return nil
}

func layoutOf(r *config.Resource) migrate.Layout {
	return migrate.Layout(r.Migration.Spec.Source.Layout)
}

// sumMismatch: the only problems of a directory are that its ptah.sum no
// longer matches or does not parse, which is what writing it again is for.
func sumMismatch(err error) bool {
	var se *migrate.SourceError
	if !errors.As(err, &se) {
		return false
	}
	for _, p := range se.Problems {
		if !errors.Is(p.Err, migrate.ErrSumMismatch) && !errors.Is(p.Err, migrate.ErrBadSum) {
			return false
		}
	}
	return true
}
