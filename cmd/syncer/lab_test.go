package main

// The lab (bench, soak, the fake third party) is a binary of its own:
// syncer links none of it, and `syncer fake-thirdparty`, a command of the
// contract, runs the lab's fake as if it had been started directly.

import (
	"bufio"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDaemonLinksNoLab: the binary every production container runs
// carries neither the bench, the soak nor the fake third party: nothing
// of the lab's wing, internal/lab.
func TestDaemonLinksNoLab(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, pkg := range strings.Fields(string(out)) {
		require.NotContains(t, pkg, "/internal/lab/", "syncer links %s", pkg)
	}
}

// TestFakeThirdpartyRunsTheLab: flags pass through, the fake serves, and
// SIGTERM sent to the process started as syncer stops the fake with 0.
func TestFakeThirdpartyRunsTheLab(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "fake-thirdparty", "--addr", "127.0.0.1:0", "--token", "t0ken")
	cmd.Env = cleanEnv()
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, "fake third party listening on http://")
	url := strings.Fields(strings.TrimPrefix(line, "fake third party listening on "))[0]

	resp, err := http.Get(url + "/v1/stats")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/batches", strings.NewReader(`{"items":[]}`))
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "--token reached the fake")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait())
}

// TestFakeThirdpartyWithoutTheLab: a syncer installed alone says in one
// line how to get the lab, exit 1.
func TestFakeThirdpartyWithoutTheLab(t *testing.T) {
	t.Parallel()
	alone := filepath.Join(t.TempDir(), "syncer")
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(alone, data, 0o755))
	cmd := exec.Command(alone, "fake-thirdparty", "--addr", "127.0.0.1:0")
	cmd.Env = append(cleanEnv(), "PATH="+t.TempDir())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 1, ee.ExitCode(), stderr.String())
	require.Len(t, strings.Split(strings.TrimSpace(stderr.String()), "\n"), 1, stderr.String())
	require.Contains(t, stderr.String(), "syncer-lab")
	require.Contains(t, stderr.String(), "make build")
}
