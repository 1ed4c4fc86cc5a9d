package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

// installNotesToCRM makes the table notes (id, body), installs it as a
// source exported to a destination crm at url, and returns the
// configuration for the daemons the test starts.
func (b *bundle) installNotesToCRM(t *testing.T, url string) *config.Config {
	t.Helper()
	b.exec(t, `CREATE TABLE notes (id bigint PRIMARY KEY, body text)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
sources:
  - {table: notes, key: id, destination: crm}
`, url), nil)
	b.installSources(t, cfg)
	return cfg
}

// rowIDs is a receiver that records the id of every row a request sends
// as {"rows": [{"id": ...}]}, the body the custom-format tests program.
type rowIDs struct {
	url string
	mu  sync.Mutex
	got map[string]bool
}

func newRowIDs(t *testing.T) *rowIDs {
	r := &rowIDs{got: map[string]bool{}}
	r.url = newRecvServer(t, func(body []byte) {
		var m struct {
			Rows []struct {
				ID string `json:"id"`
			} `json:"rows"`
		}
		_ = json.Unmarshal(body, &m)
		r.mu.Lock()
		for _, row := range m.Rows {
			r.got[row.ID] = true
		}
		r.mu.Unlock()
	})
	return r
}

// count returns how many distinct ids arrived.
func (r *rowIDs) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// has reports whether id arrived.
func (r *rowIDs) has(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

// startHolderThenSecond starts a first syncer run at runURL with args,
// waits until holder says it holds the export lock, then starts a second:
// the freeze tests' two daemons, the first of which is the one to freeze.
func (b *bundle) startHolderThenSecond(t *testing.T, runURL string, holder func() (int, bool), args ...string) (first *exec.Cmd, firstErr *dbtest.Buffer, second *exec.Cmd, secondErr *dbtest.Buffer) {
	t.Helper()
	first, firstErr = b.startRun(t, runURL, args...)
	waitFor(t, time.Minute, "the first daemon takes the lock", func() bool {
		pid, held := holder()
		return held && pid == first.Process.Pid
	})
	second, secondErr = b.startRun(t, runURL, args...)
	return first, firstErr, second, secondErr
}

// installSlowOrders makes the table orders (id, v), installs it as a
// source exported in batches of 20 to a destination crm at dest held to 5
// requests a second, and returns the configuration's file for the
// daemons the test starts.
func (b *bundle) installSlowOrders(t *testing.T, dest *destination) string {
	t.Helper()
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, v int)`)
	cfgText := fmt.Sprintf("destinations:\n  crm:\n    url: %s\n    rate_limit: 5\nsources:\n  - {table: orders, key: id, destination: crm, batch_size: 20}\n", dest.url)
	b.installSources(t, sourcesConfig(t, cfgText, nil))
	cfgFile := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfgText), 0o600))
	return cfgFile
}

// metricsText is what the daemon listening on addr shows on /metrics.
func metricsText(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "metrics: %s", text)
	return string(text)
}
