package e2e

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/syncer-dev/syncer/internal/config"
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
