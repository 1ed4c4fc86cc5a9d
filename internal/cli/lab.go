package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// LabBinary is the name of the lab's command (cmd/syncer-lab): the bench,
// the soak and the fake third party, built apart so the daemon's binary,
// the one every production container runs, carries none of them.
const LabBinary = "syncer-lab"

// LabCmd is `syncer fake-thirdparty`: docs/protocol.md section 3 and the README's
// quick start name it, so it stays a command of syncer, but it runs the
// lab's fake, replacing this process (execve) so that the fake's flags, its
// output, its exit status and every signal are the lab's own, as if it had
// been started directly.
type LabCmd struct {
	Args []string `arg:"" optional:"" passthrough:"" help:"The fake's flags (syncer-lab fake-thirdparty --help)."`
}

// Run execs the lab binary with the command's name and args; it returns
// only when the lab cannot be started.
func (c *LabCmd) Run(_ context.Context, _ *Env) error {
	path, err := findLab()
	if err != nil {
		return err
	}
	argv := append([]string{path, "fake-thirdparty"}, c.Args...)
	if err := syscall.Exec(path, argv, os.Environ()); err != nil {
		return fmt.Errorf("run %s: %w", path, err)
	}
	return nil
}

// findLab finds syncer-lab beside this executable (bin/, or /syncer-lab in
// the image) and otherwise on PATH; when absent, the error says how to get
// it.
func findLab() (string, error) {
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), LabBinary)
		if st, err := os.Stat(beside); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	path, err := exec.LookPath(LabBinary)
	if err == nil {
		return path, nil
	}
	if !errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("find %s: %w", LabBinary, err)
	}
	return "", fmt.Errorf("%s is neither beside this executable nor on PATH: build it with `make build` (bin/%s) or `go install github.com/syncer-dev/syncer/cmd/%s@latest`", LabBinary, LabBinary, LabBinary)
}
