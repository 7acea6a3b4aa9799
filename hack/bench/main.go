// Command bench is make bench's driver: it starts a throwaway PostgreSQL
// server and runs the benchmark sections of internal/bench against it and
// the ptah binary it is given, then prints one table of medians, ratios
// and targets (and, with -markdown, the same table for docs/performance.md).
//
//	go run ./hack/bench -ptah bin/ptah [-sections catalog,plans] [-tables 1000,10000] [-runs 5] [-resources 100] [-tools bin/benchtools]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/ptah-run/ptah/internal/bench"
	"github.com/ptah-run/ptah/internal/pgserver"
)

func main() {
	ptah := flag.String("ptah", "bin/ptah", "the ptah binary to measure")
	sections := flag.String("sections", strings.Join(bench.SectionNames(), ","), "the sections to run, in order")
	tables := flag.String("tables", "1000,10000", "the schema sizes of the catalog and plan sections")
	runs := flag.Int("runs", 5, "runs of each timed command; the median is reported")
	keep := flag.Bool("keep", false, "keep the scratch directory (databases' files aside: the manager's and Pods' logs) and say where")
	markdown := flag.String("markdown", "", "also write the table as Markdown to this `file`")
	flag.IntVar(&bench.ControllerResources, "resources", bench.ControllerResources, "the controller section's resources of each family")
	flag.StringVar(&bench.Tools, "tools", bench.Tools, "the `dir` of the peers the migrations section runs (make bench-tools)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, *ptah, *sections, *tables, *runs, *markdown, *keep)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, ptah, sections, tables string, runs int, markdown string, keep bool) error {
	env := &bench.Env{Runs: runs, Log: os.Stderr}
	var err error
	if env.Ptah, err = filepath.Abs(ptah); err != nil {
		return err
	}
	if bench.Tools, err = filepath.Abs(bench.Tools); err != nil {
		return err
	}
	if _, err := os.Stat(env.Ptah); err != nil {
		return fmt.Errorf("the ptah binary: %w (make bench builds it)", err)
	}
	for _, t := range strings.Split(tables, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(t))
		if err != nil || n <= 0 {
			return fmt.Errorf("-tables: %q is not a positive number", t)
		}
		env.Tables = append(env.Tables, n)
	}
	if env.Work, err = os.MkdirTemp("", "ptah-bench"); err != nil {
		return err
	}
	if keep {
		defer env.Logf("kept %s", env.Work)
	} else {
		defer os.RemoveAll(env.Work)
	}
	// A durable server, as in production: what a migration must make
	// durable before its file runs is part of what is measured.
	env.Server, err = pgserver.Start(pgserver.Setting("fsync", "on"), pgserver.Setting("synchronous_commit", "on"),
		pgserver.Setting("full_page_writes", "on"), pgserver.Setting("max_locks_per_transaction", "256"))
	if err != nil {
		return err
	}
	defer env.Server.Stop()
	env.Logf("PostgreSQL from %s in %s; ptah %s; %d CPUs", env.Server.BinDir, env.Server.Dir, env.Ptah, runtime.NumCPU())

	var rows []bench.Row
	for _, name := range strings.Split(sections, ",") {
		sec, ok := bench.Section(strings.TrimSpace(name))
		if !ok {
			return fmt.Errorf("-sections: no section %q (there are %s)", name, strings.Join(bench.SectionNames(), ", "))
		}
		got, err := sec(ctx, env)
		if err != nil {
			return fmt.Errorf("section %s: %w", name, err)
		}
		rows = append(rows, got...)
	}
	fmt.Println()
	bench.Print(os.Stdout, rows)
	if markdown != "" {
		f, err := os.Create(markdown)
		if err != nil {
			return err
		}
		defer f.Close()
		bench.Markdown(f, rows)
	}
	return nil
}
