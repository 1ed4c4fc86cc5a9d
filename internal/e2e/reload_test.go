package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 29: a source added while the daemons run (`migrate` with a new
// file) is exported without a restart. The daemon reads its file again:
// the edit made before migrate ran names a source not installed yet, which
// cannot run, so the previous configuration keeps exporting; once migrate
// has installed it, the daemon replaces its export in place and the new
// table's rows arrive. A source migrate installed that the daemon's file
// does not name is said in syncer_source_unconfigured.
func TestSourceAddedWhileTheDaemonRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	crm := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE orders (id bigint PRIMARY KEY, total int)`)
	b.exec(t, `CREATE TABLE line_items (tenant_id text, id bigint, qty int, PRIMARY KEY (tenant_id, id))`)
	b.exec(t, `CREATE TABLE notes (id bigint PRIMARY KEY, body text)`)
	head := fmt.Sprintf("destinations:\n  crm:\n    url: %s\nsources:\n  - {table: orders, key: id, destination: crm}\n", crm.url)
	withItems := head + "  - {table: line_items, key: [tenant_id, id], destination: crm}\n"
	withNotes := withItems + "  - {table: notes, key: id, destination: crm}\n"

	path := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(path, []byte(head), 0o600))
	b.installSources(t, sourcesConfig(t, head, nil))

	pool, err := pgxpool.New(context.Background(), b.dsn)
	require.NoError(t, err)
	ready := make(chan string, 8)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Supervise(ctx, pool, &daemon.SuperviseConfig{
			Path:     path,
			Interval: 200 * time.Millisecond,
			Daemon: func(src *config.Config) (*daemon.Config, error) {
				return &daemon.Config{HTTPAddr: "127.0.0.1:0", ShutdownTimeout: 10 * time.Second, Logger: testLogger(t),
					Sources: src, Ready: func(addr string) { ready <- addr }}, nil
			},
			Logger: testLogger(t),
		})
		pool.Close()
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()
	addr := <-ready

	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(1, 10) g`)
	b.waitSourcesDrained(t, "orders")

	// An edit half saved does not parse: said, and the export goes on.
	require.NoError(t, os.WriteFile(path, []byte(head+"  - {table: line_items, key: [tenant"), 0o600))
	waitFor(t, 30*time.Second, "the unreadable file said", func() bool {
		return strings.Contains(metricsText(t, addr), "syncer_config_last_reload_successful 0")
	})
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(11, 20) g`)
	b.waitSourcesDrained(t, "orders")

	// The file names line_items before migrate installed it: refused, and
	// orders keep flowing under the previous configuration.
	require.NoError(t, os.WriteFile(path, []byte(withItems), 0o600))
	time.Sleep(time.Second) // five readings of the file
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(21, 40) g`)
	b.waitSourcesDrained(t, "orders")
	require.Empty(t, ready, "a configuration that cannot run replaces nothing")

	// migrate with the new file: the daemon takes it, no restart.
	b.installSources(t, sourcesConfig(t, withItems, nil))
	b.exec(t, `INSERT INTO line_items VALUES ('a', 1, 1), ('a,b', 1, 2), ('b', 2, 3)`)
	select {
	case addr = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not take the new configuration in 30 s")
	}
	b.waitSourcesDrained(t, "orders", "line_items")
	b.exec(t, `INSERT INTO orders SELECT g, g FROM generate_series(41, 60) g`)
	b.waitSourcesDrained(t, "orders")
	ids := byID(crm.fake)
	require.Len(t, ids, 63, "60 orders and 3 line items")
	require.Contains(t, ids, `["a,b",1]`)
	requireOnceInOrder(t, crm.fake)
	require.Contains(t, metricsText(t, addr), "syncer_config_last_reload_successful 1")

	// migrate installs notes, which this daemon's file does not name.
	b.installSources(t, sourcesConfig(t, withNotes, nil))
	waitFor(t, 30*time.Second, "the unconfigured source said", func() bool {
		return strings.Contains(metricsText(t, addr), `syncer_source_unconfigured{source="notes"} 1`)
	})
	require.Empty(t, ready, "a source the file does not name replaces nothing")
}
