// Package bench is the benchmark driver behind make bench: it starts a
// throwaway PostgreSQL server, builds the databases and declared files each
// section needs, times whole ptah processes (and their peers or floors,
// side by side in the same run, alternating), and prints one table of
// medians and ratios, each checked against its target.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ptah-run/ptah/internal/pgserver"
)

// Env is what every section shares.
type Env struct {
	Server *pgserver.Server
	// Ptah is the ptah binary under test.
	Ptah string
	// Work is a scratch directory, removed at the end.
	Work string
	// Runs is how many times each timed command runs (the median is
	// reported).
	Runs int
	// Tables are the schema sizes the plan and catalog sections use.
	Tables []int
	// Log hears progress, for the person waiting.
	Log io.Writer

	schemas map[int]*Schema // built on first use (Env.Schema)
}

// Logf reports progress.
func (e *Env) Logf(format string, args ...any) { fmt.Fprintf(e.Log, "bench: "+format+"\n", args...) }

// Row is one line of the report.
type Row struct {
	Section string
	// What is measured, e.g. "no-op plan, 1,000 tables".
	What string
	// Value is the figure, already formatted with its unit ("0.42 s",
	// "22 queries", "96 MiB").
	Value string
	// Ratio is the figure against Versus, measured in the same run
	// (0: none).
	Ratio  float64
	Versus string
	// Target is the goal, as the issue states it ("<= 0.5 s"); Met says
	// whether the figure meets it (nil: no target).
	Target string
	Met    *bool
}

// Met is a helper for Row.Met.
func Met(ok bool) *bool { return &ok }

// cells are r's columns as the report prints them; missed is how a
// target not met reads.
func (r Row) cells(missed string) []string {
	ratio, met := "", ""
	if r.Ratio != 0 {
		ratio = fmt.Sprintf("%.2fx %s", r.Ratio, r.Versus)
	}
	if r.Met != nil {
		met = "yes"
		if !*r.Met {
			met = missed
		}
	}
	return []string{r.Section, r.What, r.Value, ratio, r.Target, met}
}

// Print writes rows as one table.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SECTION\tMEASURE\tVALUE\tRATIO\tTARGET\tMET")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r.cells("NO"), "\t"))
	}
	tw.Flush()
}

// Markdown writes rows as a Markdown table, for docs/performance.md.
func Markdown(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| Section | Measure | Value | Ratio | Target | Met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintln(w, "| "+strings.Join(r.cells("**no**"), " | ")+" |")
	}
}

// Sample is one timed run of a whole process.
type Sample struct {
	Wall time.Duration
	// MaxRSS is the process's peak resident set, in bytes.
	MaxRSS int64
}

// Run runs a command to completion and times it; a non-zero exit is an
// error unless the code is in okCodes.
func Run(ctx context.Context, cmd *exec.Cmd, okCodes ...int) (Sample, error) {
	var out strings.Builder
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	cmd.Stderr = &out
	began := time.Now()
	err := cmd.Run()
	s := Sample{Wall: time.Since(began)}
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			s.MaxRSS = ru.Maxrss * 1024 // kilobytes on Linux
		}
		if err != nil && slices.Contains(okCodes, ps.ExitCode()) {
			err = nil
		}
	}
	if err != nil {
		return s, fmt.Errorf("%s: %w\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return s, nil
}

// Alternate runs each function runs times, interleaved (A B A B ...), so
// that a noisy machine weighs on all of them alike, and returns their
// samples in the order given.
func Alternate(runs int, fns ...func() (Sample, error)) ([][]Sample, error) {
	out := make([][]Sample, len(fns))
	for range runs {
		for i, fn := range fns {
			s, err := fn()
			if err != nil {
				return nil, err
			}
			out[i] = append(out[i], s)
		}
	}
	return out, nil
}

// Median is the median wall time of samples.
func Median(samples []Sample) time.Duration {
	ds := make([]time.Duration, len(samples))
	for i, s := range samples {
		ds[i] = s.Wall
	}
	slices.Sort(ds)
	if len(ds) == 0 {
		return 0
	}
	if len(ds)%2 == 1 {
		return ds[len(ds)/2]
	}
	return (ds[len(ds)/2-1] + ds[len(ds)/2]) / 2
}

// PeakRSS is the largest peak resident set among samples.
func PeakRSS(samples []Sample) int64 {
	var m int64
	for _, s := range samples {
		m = max(m, s.MaxRSS)
	}
	return m
}

// Ratio is the ratio of the medians of a to b.
func Ratio(a, b []Sample) float64 { return Median(a).Seconds() / Median(b).Seconds() }

// Seconds formats a duration as seconds.
func Seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// MiB formats bytes as mebibytes.
func MiB(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

// Count formats n with thousands separators: 10000 is "10,000".
func Count(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Env's environment for a ptah process: the process's own, plus vars.
func Environ(vars ...string) []string { return append(os.Environ(), vars...) }

// A SectionFunc measures one part of ptah and returns its report rows.
type SectionFunc func(ctx context.Context, env *Env) ([]Row, error)

// sections are the report's parts, in its order; each lives in a file of
// its own.
var sections = []struct {
	name string
	fn   SectionFunc
}{
	{"catalog", Catalog},
	{"plans", Plans},
	{"migrations", Migrations},
	{"applies", Applies},
	{"controller", Controller},
}

// SectionNames lists the sections in report order.
func SectionNames() []string {
	var names []string
	for _, s := range sections {
		names = append(names, s.name)
	}
	return names
}

// Section finds a section by name.
func Section(name string) (SectionFunc, bool) {
	for _, s := range sections {
		if s.name == name {
			return s.fn, true
		}
	}
	return nil, false
}
