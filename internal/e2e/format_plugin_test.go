package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/formatstest"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 46: a new format takes one package (formatstest, with its one
// setting, its parsing and its requests) and one registration (the With
// below). The configuration reads its field and refuses a bad value
// naming the key; the daemon exports a table through it; a real HTTP
// receiver gets requests shaped by the setting.
func TestNewFormatIsOnePackageAndOneRegistration(t *testing.T) {
	t.Parallel()
	reg := formats.Default().With(formatstest.Kind) // the one registration

	// Without the registration the name and its field are unknown, as
	// any format's would be.
	_, err := config.Parse([]byte("destinations:\n  d:\n    url: http://127.0.0.1:1\n    format: greeting\nsources:\n  - {table: t, key: id, destination: d}\n"), nil)
	require.ErrorContains(t, err, `unknown format "greeting"`)
	// Its parsing is its own, and its errors name the YAML key and line.
	_, err = config.ParseFormats([]byte("destinations:\n  d:\n    url: http://127.0.0.1:1\n    format: greeting\n    greeting: good day\nsources:\n  - {table: t, key: id, destination: d}\n"), nil, reg)
	require.EqualError(t, err, "destinations.d.greeting: must be one word, such as hello (line 5)")
	// Its field is refused with another format, from the registry.
	_, err = config.ParseFormats([]byte("destinations:\n  d:\n    url: http://127.0.0.1:1\n    greeting: bonjour\nsources:\n  - {table: t, key: id, destination: d}\n"), nil, reg)
	require.EqualError(t, err, "destinations.d.greeting: is only for format greeting (line 4)")

	b := setup(t, fakethirdparty.Config{})
	var mu sync.Mutex
	got := map[string]string{}
	recv := newRecvHandler(t, func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body formatstest.Body
		if r.URL.Path != "/api"+formatstest.Path || json.Unmarshal(raw, &body) != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		mu.Lock()
		for _, id := range body.IDs {
			got[id] = body.Greeting + " from " + body.Source
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	b.exec(t, `CREATE TABLE guests (id bigint PRIMARY KEY, name text)`)
	cfg, err := config.ParseFormats([]byte(fmt.Sprintf(`destinations:
  lobby:
    url: %s/api
    format: greeting
    greeting: bonjour
sources:
  - {table: guests, key: id, destination: lobby}
`, recv)), nil, reg)
	require.NoError(t, err)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.ThirdParty.URL = ""; c.Sources = cfg })
	b.exec(t, `INSERT INTO guests SELECT g, 'guest ' || g FROM generate_series(1, 5) g`)
	b.waitSourcesDrained(t, "guests")
	waitFor(t, 30*time.Second, "every guest greeted", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 5
	})
	mu.Lock()
	defer mu.Unlock()
	for id, g := range got {
		require.Equal(t, "bonjour from guests", g, "guest %s", id)
	}
}
