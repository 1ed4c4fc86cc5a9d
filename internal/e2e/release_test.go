package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// release is syncer built as it was at one commit of this repository's
// history: its binary and its source tree (whose deploy/ the upgrade tests
// read as a user of that release had it).
type release struct {
	bin, src string
}

var (
	releasesMu sync.Mutex
	releases   = map[string]*releaseBuild{}
)

type releaseBuild struct {
	once sync.Once
	rel  release
	err  error
}

// releaseBinary builds syncer as it was at commit, from this repository's
// own history (git archive into a temporary directory, go build there with
// the module cache), once per test binary. CI runs on a full clone, so the
// history is there; a shallow clone fails the test with a line that says
// how to get it, rather than skipping the only proof that an upgrade in
// place loses nothing.
func releaseBinary(t *testing.T, commit string) release {
	t.Helper()
	releasesMu.Lock()
	b, ok := releases[commit]
	if !ok {
		b = &releaseBuild{}
		releases[commit] = b
	}
	releasesMu.Unlock()
	b.once.Do(func() { b.rel, b.err = buildRelease(commit) })
	require.NoError(t, b.err)
	return b.rel
}

func buildRelease(commit string) (release, error) {
	// From a subdirectory git archive takes only that directory.
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return release{}, fmt.Errorf("git rev-parse --show-toplevel: the upgrade test builds commit %s from this repository's history, and needs a git clone: %w", commit, err)
	}
	repo := strings.TrimSpace(string(top))
	check := exec.Command("git", "cat-file", "-e", commit+"^{commit}")
	check.Dir = repo
	if out, err := check.CombinedOutput(); err != nil {
		return release{}, fmt.Errorf("commit %s is not in this clone's history (git fetch --unshallow): %v %s", commit, err, out)
	}
	dir, err := os.MkdirTemp("", "syncer-release-"+commit+"-")
	if err != nil {
		return release{}, err
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return release{}, err
	}
	archive := exec.Command("git", "archive", "--format=tar", commit)
	archive.Dir = repo
	untar := exec.Command("tar", "-x", "-C", src)
	var archiveErr, untarErr bytes.Buffer // one each: the two write at once
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if untar.Stdin, err = archive.StdoutPipe(); err != nil {
		return release{}, err
	}
	if err := untar.Start(); err != nil {
		return release{}, err
	}
	if err := archive.Run(); err != nil {
		return release{}, fmt.Errorf("git archive %s: %v\n%s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		return release{}, fmt.Errorf("untar %s: %v\n%s", commit, err, untarErr.String())
	}
	bin := filepath.Join(dir, "syncer-"+commit)
	build := exec.Command("go", "build", "-o", bin, "./cmd/syncer")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return release{}, fmt.Errorf("go build at %s: %v\n%s", commit, err, out)
	}
	return release{bin: bin, src: src}, nil
}
