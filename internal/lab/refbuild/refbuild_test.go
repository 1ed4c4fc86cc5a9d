package refbuild_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/refbuild"
)

// TestBuildArgsAreTheMakefiles: the comparison measures the binary that
// ships only if it is built as `make build` builds it; a flag added to the
// Makefile and not here (or the other way) fails this test.
func TestBuildArgsAreTheMakefiles(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../../../Makefile")
	require.NoError(t, err)
	flags := regexp.MustCompile(`(?m)^BUILDFLAGS := (.*)$`).FindSubmatch(mk)
	require.NotNil(t, flags, "the Makefile's BUILDFLAGS")
	ld := regexp.MustCompile(`(?m)^LDFLAGS := (.*)$`).FindSubmatch(mk)
	require.NotNil(t, ld, "the Makefile's LDFLAGS")
	want := strings.ReplaceAll(string(flags[1]), "$(LDFLAGS)", string(ld[1]))
	want = strings.NewReplacer("$(BUILDINFO)", refbuild.BuildInfoPackage, "$(VERSION)", "v1", "$(COMMIT)", "abc").Replace(want)
	require.Regexp(t, `(?m)^\tCGO_ENABLED=0 \$\(GO\) build \$\(BUILDFLAGS\) -o bin/syncer \./cmd/syncer$`, string(mk))

	args := refbuild.BuildArgs("v1", "abc", "bin/syncer")
	require.Equal(t, []string{"build"}, args[:1])
	require.Equal(t, []string{"-o", "bin/syncer", "./cmd/syncer"}, args[len(args)-3:])
	got := strings.Join(args[1:len(args)-3], " ")
	require.Equal(t, strings.ReplaceAll(want, `"`, ""), got)
}

// TestBuildAtRef builds a small module at an older commit of a repository
// of its own: the binary is that commit's (not the work tree's), stamped
// with its version and commit, kept and reused; the default ref is where
// the branch left main.
func TestBuildAtRef(t *testing.T) {
	t.Parallel()
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	write := func(path, text string) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(repo, path)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(repo, path), []byte(text), 0o644))
	}
	git("init", "-q", "-b", "main")
	write("go.mod", "module github.com/syncer-dev/syncer\n\ngo 1.22\n")
	write("internal/buildinfo/buildinfo.go", "package buildinfo\n\nvar Version, Commit string\n")
	main := func(word string) string {
		return "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/syncer-dev/syncer/internal/buildinfo\"\n)\n\nfunc main() { fmt.Println(\"" + word + "\", buildinfo.Version, buildinfo.Commit) }\n"
	}
	write("cmd/syncer/main.go", main("old"))
	git("add", ".")
	git("commit", "-q", "-m", "old")
	old := git("rev-parse", "HEAD")
	git("checkout", "-q", "-b", "change")
	write("cmd/syncer/main.go", main("new"))
	git("commit", "-q", "-am", "new")
	write("cmd/syncer/main.go", main("uncommitted"))

	ref, err := refbuild.DefaultRef(t.Context(), repo)
	require.NoError(t, err)
	require.Equal(t, old, ref, "no tag: where the branch left main")

	var log bytes.Buffer
	cache := t.TempDir()
	cfg := &refbuild.Config{RepoDir: repo, CacheDir: cache, Log: &log}
	b, err := refbuild.Build(t.Context(), cfg, "main")
	require.NoError(t, err)
	require.Equal(t, old, b.Commit)
	require.Equal(t, filepath.Join(cache, old, "syncer"), b.Path)
	out, err := exec.Command(b.Path).Output()
	require.NoError(t, err)
	require.Equal(t, "old "+b.Version+" "+old+"\n", string(out))
	require.Contains(t, log.String(), "CGO_ENABLED=0")

	log.Reset()
	again, err := refbuild.Build(t.Context(), cfg, old[:7])
	require.NoError(t, err)
	require.Equal(t, b.Path, again.Path)
	require.Contains(t, log.String(), "already built")

	git("tag", "v0.1.0", old)
	ref, err = refbuild.DefaultRef(t.Context(), repo)
	require.NoError(t, err)
	require.Equal(t, "v0.1.0", ref, "the last tag first")

	_, err = refbuild.Build(t.Context(), cfg, "nosuchref")
	require.ErrorContains(t, err, `"nosuchref" is not a commit`)
}
