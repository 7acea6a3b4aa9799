package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/ptah-run/ptah/pkg/api/v1alpha1"
)

// version is set at build time by the Makefile
// (-ldflags "-X github.com/ptah-run/ptah/internal/cli.version=...");
// otherwise it comes from the module's build information.
var version = ""

func versionString() string {
	v := version
	if v == "" {
		v = "(devel)"
		if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
			v = bi.Main.Version
		}
	}
	return fmt.Sprintf("ptah %s (%s, contract version %d, %s %s/%s)",
		v, v1alpha1.APIVersion, v1alpha1.ContractVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print ptah's version",
		Long: `Print ptah's version, the API version of the resources it reads, and the
contract version of the state it stores (a ptah refuses state written by a
newer contract).

` + exitCodeHelp("version"),
		Example: "  ptah version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(a.stdout, versionString())
			return err
		},
	}
}
