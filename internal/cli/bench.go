package cli

import (
	"context"
	"errors"
)

// BenchCmd is `syncer bench`.
type BenchCmd struct {
	DB
}

// Run runs the benchmark.
func (c *BenchCmd) Run(ctx context.Context, env *Env) error {
	return errors.New("not built yet")
}
