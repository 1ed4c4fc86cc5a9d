// Command syncer exports rows of the resources table to a third-party HTTP
// API. See README.md.
package main

import (
	"context"
	"os"

	"github.com/syncer-dev/syncer/internal/cli"
)

func main() {
	os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
