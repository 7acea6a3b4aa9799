package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestHitExits runs this test binary again with the failpoint set and
// expects it to stop at the point, before the code after it.
func TestHitExits(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Hit("other") // a different name: no effect
		Hit(MidPlan)
		os.Stdout.WriteString("after the failpoint\n")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitExits$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"="+MidPlan)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != ExitCode {
		t.Fatalf("child: %v, want exit status %d\n%s", err, ExitCode, out)
	}
	if !strings.Contains(string(out), "failpoint mid-plan") || strings.Contains(string(out), "after the failpoint") {
		t.Fatalf("child output:\n%s", out)
	}
}

func TestHitUnsetIsNoop(t *testing.T) {
	t.Setenv(EnvVar, "")
	Hit(MidPlan)
	Hit("")
}
