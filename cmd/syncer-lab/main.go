// Command syncer-lab is syncer's lab: `bench`, `soak` and `fake-thirdparty`.
// It is built apart from the daemon (cmd/syncer) so that the binary every
// production container runs carries none of it; see docs/design.md.
package main

import (
	"context"
	"os"

	"github.com/syncer-dev/syncer/internal/lab/labcli"
)

func main() {
	os.Exit(labcli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
