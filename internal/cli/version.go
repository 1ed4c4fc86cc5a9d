package cli

import (
	"encoding/json"
	"fmt"

	"github.com/syncer-dev/syncer/internal/buildinfo"
)

// VersionCmd is `syncer version`.
type VersionCmd struct {
	JSON bool `name:"json" help:"Print one JSON object."`
}

// Run prints the version, commit and Go version.
func (c *VersionCmd) Run(env *Env) error {
	info := buildinfo.Get()
	if c.JSON {
		return json.NewEncoder(env.Stdout).Encode(info)
	}
	_, err := fmt.Fprintf(env.Stdout, "syncer %s (commit %s, %s)\n", info.Version, info.Commit, info.GoVersion)
	return err
}
