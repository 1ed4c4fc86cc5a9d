package deploy

import (
	"bufio"
	"encoding/json"
	"go/ast"
	goparser "go/parser"
	"go/token"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, ENV...
	Args string
}

// image is what the tests of other files need to know of the image.
type image struct {
	Stages      [][]instruction // each starts with its FROM
	Binary      string          // the ENTRYPOINT's program
	Port        int             // EXPOSE
	User        int             // USER's numeric uid
	HTTPAddr    string          // ENV SYNCER_HTTP_ADDR
	Healthcheck []string        // HEALTHCHECK CMD, exec form
}

// readDockerfile splits ../Dockerfile into stages of instructions. It knows
// only what this project's Dockerfile uses: whole-line comments and
// backslash continuations.
func readDockerfile(t *testing.T) image {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	require.NoError(t, err)
	defer f.Close()
	var (
		img     image
		pending string
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && pending == "") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			pending += cont + " "
			continue
		}
		line, pending = pending+line, ""
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args)}
		if in.Cmd == "FROM" {
			img.Stages = append(img.Stages, nil)
		}
		require.NotEmpty(t, img.Stages, "instruction %s before FROM", in.Cmd)
		img.Stages[len(img.Stages)-1] = append(img.Stages[len(img.Stages)-1], in)
	}
	require.NoError(t, sc.Err())
	require.Empty(t, pending, "Dockerfile ends in a continuation")
	require.GreaterOrEqual(t, len(img.Stages), 2, "a build stage and the runtime stage")

	for _, in := range img.Stages[len(img.Stages)-1] {
		switch in.Cmd {
		case "ENTRYPOINT":
			var argv []string
			require.NoError(t, json.Unmarshal([]byte(in.Args), &argv), "ENTRYPOINT in exec form: %s", in.Args)
			img.Binary = argv[0]
		case "EXPOSE":
			img.Port, err = strconv.Atoi(in.Args)
			require.NoError(t, err, "EXPOSE %s", in.Args)
		case "USER":
			uid, _, _ := strings.Cut(in.Args, ":")
			img.User, err = strconv.Atoi(uid)
			require.NoError(t, err, "USER must be numeric for Kubernetes' runAsNonRoot, got %s", in.Args)
		case "ENV":
			for _, kv := range strings.Fields(in.Args) {
				if v, ok := strings.CutPrefix(kv, "SYNCER_HTTP_ADDR="); ok {
					img.HTTPAddr = v
				}
			}
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(in.Args, "CMD ")
			require.True(t, ok, "HEALTHCHECK without CMD: %s", in.Args)
			require.NoError(t, json.Unmarshal([]byte(cmd), &img.Healthcheck), "HEALTHCHECK CMD in exec form (distroless has no shell): %s", cmd)
		}
	}
	return img
}

func addrPort(t *testing.T, addr string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err, "address %q", addr)
	p, err := strconv.Atoi(port)
	require.NoError(t, err, "address %q", addr)
	return p
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	img := readDockerfile(t)
	final := img.Stages[len(img.Stages)-1]
	build := img.Stages[0]

	base := final[0].Args
	require.True(t, strings.HasPrefix(base, "gcr.io/distroless/") && strings.HasSuffix(base, ":nonroot"), "runtime base %s", base)
	require.Equal(t, "/syncer", img.Binary)
	require.Contains(t, final, instruction{Cmd: "COPY", Args: "--from=build /out/syncer " + img.Binary})
	require.Contains(t, final, instruction{Cmd: "CMD", Args: `["run"]`})

	require.NotZero(t, img.User, "the image runs as root")
	require.Equal(t, 8080, img.Port)
	require.Equal(t, ":8080", img.HTTPAddr, "loopback would be unreachable from outside the container")
	require.Equal(t, img.Port, addrPort(t, img.HTTPAddr))
	require.Equal(t, []string{img.Binary, "healthcheck"}, img.Healthcheck)

	var goBuild string
	for _, in := range build {
		if in.Cmd == "RUN" && strings.Contains(in.Args, "go build") {
			goBuild = in.Args
		}
	}
	require.Contains(t, build, instruction{Cmd: "ARG", Args: `VERSION=""`})
	require.Contains(t, build, instruction{Cmd: "ARG", Args: `COMMIT=""`})
	require.Contains(t, goBuild, "CGO_ENABLED=0", "distroless/static has no libc")
	require.Contains(t, goBuild, "-X github.com/syncer-dev/syncer/internal/buildinfo.Version=${VERSION}")
	require.Contains(t, goBuild, "-X github.com/syncer-dev/syncer/internal/buildinfo.Commit=${COMMIT}")
}

func TestDockerignore(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../.dockerignore")
	require.NoError(t, err)
	var patterns []string
	for _, l := range strings.Split(string(raw), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	for _, want := range []string{".git", "bin", "bench-*.json"} {
		require.Contains(t, patterns, want)
	}
	// The build needs these: excluding one breaks it.
	for _, need := range []string{"go.mod", "go.sum", "cmd", "internal", "migrations", "*.go", "**/*.sql"} {
		require.NotContains(t, patterns, need)
	}
}

// TestBuildinfoVariablesExist: the linker ignores -X for a variable that does
// not exist, so a renamed variable would silently leave images unversioned.
func TestBuildinfoVariablesExist(t *testing.T) {
	t.Parallel()
	const dir = "../internal/buildinfo"
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	vars := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := goparser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, goparser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, n := range s.(*ast.ValueSpec).Names {
					vars[n.Name] = true
				}
			}
		}
	}
	require.True(t, vars["Version"] && vars["Commit"], "internal/buildinfo declares var Version and var Commit")
}

// TestImageShipsTheLabBesideSyncer: compose's fake-thirdparty service runs
// `/syncer fake-thirdparty`, which execs syncer-lab found beside /syncer,
// so the image builds the lab and copies it next to the daemon.
func TestImageShipsTheLabBesideSyncer(t *testing.T) {
	t.Parallel()
	img := readDockerfile(t)
	var built, copied bool
	for _, stage := range img.Stages {
		for _, in := range stage {
			built = built || (in.Cmd == "RUN" && strings.Contains(in.Args, "-o /out/syncer-lab ./cmd/syncer-lab"))
			copied = copied || (in.Cmd == "COPY" && strings.HasSuffix(in.Args, "/out/syncer-lab "+filepath.Dir(img.Binary)+"syncer-lab"))
		}
	}
	require.True(t, built, "the build stage builds ./cmd/syncer-lab")
	require.True(t, copied, "the image copies syncer-lab beside %s", img.Binary)
}
