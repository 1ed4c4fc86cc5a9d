// Package buildinfo says which syncer this is: the version and commit
// stamped at build time with -ldflags, or else what the Go toolchain
// recorded from the module and the VCS checkout, so `syncer version` and
// syncer_build_info never print an empty value.
//
// Stamping (the Makefile's build target does this from git):
//
//	go build -ldflags "-X github.com/syncer-dev/syncer/internal/buildinfo.Version=v1.2.3 \
//	  -X github.com/syncer-dev/syncer/internal/buildinfo.Commit=0123abc" ./cmd/syncer
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Version and Commit are set at build time with -ldflags -X. Empty means not
// stamped: Get then falls back to debug.ReadBuildInfo.
var (
	Version string
	Commit  string
)

// Unknown is what Get reports for a value neither stamped nor recorded.
const Unknown = "unknown"

// Info describes the running binary.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"go_version"`
}

// Get returns the binary's build information.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, bi)
}

// resolve prefers the stamped values, then the build info's: the module
// version (set by `go install module@version`) and the vcs.revision setting
// (set by `go build` in a git checkout), marked dirty when the tree was.
func resolve(version, commit string, bi *debug.BuildInfo) Info {
	info := Info{Version: version, Commit: commit, GoVersion: runtime.Version()}
	if bi != nil {
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		var revision string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if info.Commit == "" && revision != "" {
			info.Commit = revision
			if modified {
				info.Commit += "-dirty"
			}
		}
		if bi.GoVersion != "" {
			info.GoVersion = bi.GoVersion
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = Unknown
	}
	return info
}
