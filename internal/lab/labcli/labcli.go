// Package labcli is the lab's command line (cmd/syncer-lab): the bench, the
// soak and the fake third party, with the hidden helper processes the bench
// runs. It is a binary apart from the daemon's so that the binary every
// production container runs carries none of it (docs/design.md, "The lab is
// a binary of its own"); it runs on the daemon's command-line conventions
// (cli.Execute: exit 2 with one line naming a bad flag, 1 otherwise) and
// drives the daemon as a user would, by running the syncer binary.
package labcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/alecthomas/kong"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/lab/bench"
)

// Lab is the root of the lab's command tree.
type Lab struct {
	cli.Logging `embed:""`

	Bench          BenchCmd               `cmd:"" help:"Measure throughput, latency, writer overhead and memory against baselines from the same run."`
	Soak           SoakCmd                `cmd:"" help:"Run a seeded chaos soak of real daemons against a PostgreSQL of its own, and check every promise (make soak)."`
	FakeThirdparty FakeThirdpartyCmd      `cmd:"" name:"fake-thirdparty" help:"Serve a local stand-in for the third-party API, with fault knobs."`
	BenchWebhooks  BenchWebhooksClientCmd `cmd:"" name:"bench-webhooks-client" hidden:"" help:"The plain client the bench's webhooks row compares with (run by syncer-lab bench)."`
	BenchPoller    BenchPollerCmd         `cmd:"" name:"bench-poller" hidden:"" help:"The plain polling exporter the bench's receipt rows compare with (run by syncer-lab bench)."`
}

// program is the lab's name, description and --help defaults.
func program() cli.Program {
	return cli.Program{
		Name:        cli.LabBinary,
		Description: "The lab of syncer: its benchmark, its chaos soak and a fake third party. It runs the syncer binary (beside it, or on PATH) as the daemon.",
		Vars:        kong.Vars{"bench_database_url": bench.DatabaseURLDefault},
	}
}

// Main runs the lab's command line and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var root Lab
	return cli.Execute(ctx, program(), &root, &root.Logging, args, stdout, stderr)
}

// usageError is a configuration error: cli.Execute exits 2 on it.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) IsUsage() bool { return true }

// usagef returns a usage error naming the flag and its variable.
func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// syncerBinary is the daemon the bench and the soak run: flag, when set;
// otherwise syncer beside this executable (make build puts both in bin/),
// then syncer on PATH.
func syncerBinary(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), "syncer")
		if st, err := os.Stat(beside); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	path, err := exec.LookPath("syncer")
	if err == nil {
		return path, nil
	}
	if !errors.Is(err, exec.ErrNotFound) {
		return "", fmt.Errorf("find syncer: %w", err)
	}
	return "", errors.New("the syncer binary is neither beside this executable nor on PATH: build both with `make build` (bin/), or name it with --binary")
}
