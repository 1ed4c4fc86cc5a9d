package daemon

import (
	"context"
	"net/http"
	"strings"

	"github.com/syncer-dev/syncer/internal/metrics"
)

// ConsoleFunc builds the web console's handler (internal/console) once the
// daemon's metrics exist; it runs until ctx ends.
type ConsoleFunc func(ctx context.Context, m *metrics.Metrics) (http.Handler, error)

// withConsole serves /console and below from console, the rest from h.
// Without a console, /console is whatever h says of it: 404.
func withConsole(h, console http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/console" || strings.HasPrefix(r.URL.Path, "/console/") {
			console.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
