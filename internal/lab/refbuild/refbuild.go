// Package refbuild builds the syncer daemon as it was at a git ref, the way
// `make build` builds it (static, -trimpath, no symbol table or DWARF, the
// version and commit stamped), so that a benchmark compares two binaries
// that differ only in their source. The source is taken with `git archive`
// into a directory of its own: the checkout being measured is never
// touched, and a tree with uncommitted changes builds its ref as committed.
// A binary is kept under the cache directory by its commit, so a second
// comparison with the same ref does not build it again.
package refbuild

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildInfoPackage is where `make build` stamps the version and commit.
const BuildInfoPackage = "github.com/syncer-dev/syncer/internal/buildinfo"

// Config configures Build.
type Config struct {
	// RepoDir is a directory inside the git repository. Defaults to ".".
	RepoDir string
	// CacheDir keeps the binaries, one directory per commit. Defaults to
	// bin/refs under the repository's top level (bin/ is not committed).
	CacheDir string
	// Go is the go command. Defaults to "go".
	Go string
	// Log receives the commands run. Defaults to discarding.
	Log io.Writer
}

// Binary is a daemon built at a ref.
type Binary struct {
	// Ref is the ref as asked, Commit the full hash it names, Version what
	// `git describe --tags --always` says of it.
	Ref, Commit, Version string
	// Path is the executable.
	Path string
}

// Build builds cmd/syncer at ref and returns the binary; a binary built
// earlier for the same commit is reused.
func Build(ctx context.Context, cfg *Config, ref string) (*Binary, error) {
	c := *cfg
	c.RepoDir = cmp.Or(c.RepoDir, ".")
	c.Go = cmp.Or(c.Go, "go")
	if c.Log == nil {
		c.Log = io.Discard
	}
	top, err := git(ctx, c.RepoDir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	commit, err := git(ctx, top, "rev-parse", "--verify", "--end-of-options", ref+"^{commit}")
	if err != nil {
		return nil, fmt.Errorf("refbuild: %q is not a commit: %w", ref, err)
	}
	version, err := git(ctx, top, "describe", "--tags", "--always", commit)
	if err != nil {
		return nil, err
	}
	b := &Binary{Ref: ref, Commit: commit, Version: version}
	c.CacheDir = cmp.Or(c.CacheDir, filepath.Join(top, "bin", "refs"))
	b.Path = filepath.Join(c.CacheDir, commit, "syncer")
	if st, err := os.Stat(b.Path); err == nil && st.Mode().IsRegular() {
		fmt.Fprintf(c.Log, "refbuild: %s (%s) already built: %s\n", ref, short(commit), b.Path)
		return b, nil
	}
	src, err := os.MkdirTemp("", "syncer-ref-"+short(commit)+"-")
	if err != nil {
		return nil, fmt.Errorf("refbuild: %w", err)
	}
	defer os.RemoveAll(src)
	fmt.Fprintf(c.Log, "refbuild: git archive %s into %s\n", short(commit), src)
	if err := archive(ctx, top, commit, src); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(b.Path), 0o755); err != nil {
		return nil, fmt.Errorf("refbuild: %w", err)
	}
	// Built beside its final name and renamed, so an interrupted build
	// never leaves a binary the cache would take for a whole one.
	tmp := b.Path + ".tmp"
	args := BuildArgs(version, commit, tmp)
	fmt.Fprintf(c.Log, "refbuild: CGO_ENABLED=0 %s %s\n", c.Go, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, c.Go, args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("refbuild: build %s: %w: %s", short(commit), err, strings.TrimSpace(out.String()))
	}
	if err := os.Rename(tmp, b.Path); err != nil {
		return nil, fmt.Errorf("refbuild: %w", err)
	}
	return b, nil
}

// BuildArgs are the arguments of `go` that `make build` gives it for the
// daemon (its BUILDFLAGS), to be run with CGO_ENABLED=0.
func BuildArgs(version, commit, out string) []string {
	ldflags := fmt.Sprintf("-s -w -X %s.Version=%s -X %s.Commit=%s", BuildInfoPackage, version, BuildInfoPackage, commit)
	return []string{"build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/syncer"}
}

// DefaultRef is the ref a change is compared with: the last tag reachable
// from HEAD, or else where HEAD left main (its merge base with main, or
// with origin/main when there is no local main).
func DefaultRef(ctx context.Context, repoDir string) (string, error) {
	repoDir = cmp.Or(repoDir, ".")
	if tag, err := git(ctx, repoDir, "describe", "--tags", "--abbrev=0"); err == nil && tag != "" {
		return tag, nil
	}
	var errs []error
	for _, main := range []string{"main", "origin/main"} {
		base, err := git(ctx, repoDir, "merge-base", "HEAD", main)
		if err == nil {
			return base, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("refbuild: no tag and no main to start from; name a ref: %w", errors.Join(errs...))
}

// archive writes the tree of commit into dir with `git archive`.
func archive(ctx context.Context, top, commit, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "-C", top, "archive", "--format=tar", commit)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("refbuild: git archive: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("refbuild: git archive: %w", err)
	}
	untarErr := untar(out, dir)
	_, _ = io.Copy(io.Discard, out)
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("refbuild: git archive: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return untarErr
}

// untar extracts the regular files, directories and symlinks of a tar
// stream under dir, refusing names that would leave it.
func untar(r io.Reader, dir string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("refbuild: read the archive: %w", err)
		}
		name := filepath.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("refbuild: the archive names %q, outside the tree", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return fmt.Errorf("refbuild: %w", err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("refbuild: %w", err)
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o600)
			if err != nil {
				return fmt.Errorf("refbuild: %w", err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("refbuild: write %s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, path); err != nil {
				return fmt.Errorf("refbuild: %w", err)
			}
		}
	}
}

// git runs git in dir and returns its output, trimmed.
func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

func short(commit string) string { return commit[:min(len(commit), 7)] }
