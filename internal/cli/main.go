// Package cli is ptah's command line: cobra commands, settings from flags,
// PTAH_* variables and a config file (viper), rendering, and the one mapping
// from errors to exit codes. It is the only package that knows cobra and
// viper; everything below it takes plain option values.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/internal/postgres"
	"github.com/ptah-run/ptah/internal/postgres/catalog"
)

// Main runs ptah with the process's arguments and standard streams and
// returns the exit code. It is what cmd/ptah and the testscript tests call.
func Main() int {
	// An interrupt cancels the context, so the database work below can clean
	// up (e.g. drop the dev database) before ptah exits.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer profile()()
	return Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// profile writes a CPU profile of the whole process to the file
// PTAH_CPUPROFILE names, and a heap profile at the end to the file
// PTAH_MEMPROFILE names (go tool pprof reads both): for a person finding
// out where a slow plan spends its time. It returns what ends them.
func profile() (end func()) {
	cpu, mem := os.Getenv("PTAH_CPUPROFILE"), os.Getenv("PTAH_MEMPROFILE")
	var f *os.File
	if cpu != "" {
		var err error
		if f, err = os.Create(cpu); err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
				f = nil
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "Warning: PTAH_CPUPROFILE: %v\n", err)
		}
	}
	return func() {
		if f != nil {
			pprof.StopCPUProfile()
			f.Close()
		}
		if mem != "" {
			if m, err := os.Create(mem); err == nil {
				_ = pprof.WriteHeapProfile(m)
				m.Close()
			}
		}
	}
}

// Run runs ptah with args and returns the exit code. Environment variables
// are read from the process.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return newApp(stdout, stderr).run(ctx, args)
}

// app is what every command shares: streams, settings, the secrets to keep
// out of messages, and the engine entry points (replaced in unit tests).
type app struct {
	stdout, stderr io.Writer
	secrets        *redactor
	settings       *settings
	planSchema     func(context.Context, catalog.PlanRequest) (*postgres.Plan, error)
	// stderrIsTerminal decides whether apply shows progress.
	stderrIsTerminal func() bool
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, secrets: &redactor{}, planSchema: catalog.PlanSchema,
		stderrIsTerminal: func() bool { return isTerminal(stderr) }}
}

func (a *app) run(ctx context.Context, args []string) (code int) {
	defer func() {
		// A Go panic exits with status 2, which --detailed-exitcode reads as
		// "the plan has changes": a crash must never look like a result.
		if p := recover(); p != nil {
			msg := fmt.Sprintf("internal error: %v\n%s", p, debug.Stack())
			fmt.Fprintln(a.stderr, "ptah: "+a.secrets.redact(msg))
			fmt.Fprintln(a.stderr, "hint: "+lookupOutcome(ExitInternal).hint)
			code = ExitInternal
		}
	}()
	root := a.newRootCmd()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	code = exitCode(err)
	a.report(cmd, err, code)
	return code
}

// report prints a failure as "ptah: message" and a hint. Continuation lines
// (several configuration problems, the list of unsupported objects) are
// indented under the first.
func (a *app) report(cmd *cobra.Command, err error, code int) {
	if err == nil || code == ExitChanges {
		return
	}
	msg := a.secrets.redact(err.Error())
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	fmt.Fprintln(a.stderr, "ptah: "+lines[0])
	for _, l := range lines[1:] {
		fmt.Fprintln(a.stderr, "  "+l)
	}
	hint := hintFor(err, code)
	if code == ExitUsage && cmd != nil {
		hint = fmt.Sprintf("run '%s --help' for usage", cmd.CommandPath())
	}
	if hint != "" {
		fmt.Fprintln(a.stderr, "hint: "+hint)
	}
}

// warn prints something the person should know that does not stop ptah.
func (a *app) warn(msg string) {
	fmt.Fprintln(a.stderr, "ptah: warning: "+a.secrets.redact(msg))
}
