package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/dbtest"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// held replays every request body the destination received, in order, and
// returns what it holds: each id's last payload, or no entry when its
// last item was a tombstone. tombstones counts the tombstones by id.
func (d *destination) held(t *testing.T) (live map[string]json.RawMessage, tombstones map[string]int) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	live, tombstones = map[string]json.RawMessage{}, map[string]int{}
	for _, b := range d.bodies {
		var w struct {
			Items []struct {
				ID      string          `json:"id"`
				Payload json.RawMessage `json:"payload"`
				Deleted bool            `json:"deleted"`
			} `json:"items"`
		}
		require.NoError(t, json.Unmarshal(b, &w))
		for _, it := range w.Items {
			if it.Deleted {
				delete(live, it.ID)
				tombstones[it.ID]++
				continue
			}
			live[it.ID] = it.Payload
		}
	}
	return live, tombstones
}

// tableRows reads what a source of table should have sent: each row's key
// in its text form and payload (sel, over the table aliased x).
func (b *bundle) tableRows(t *testing.T, table, key, sel string) map[string]json.RawMessage {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT x.`+pgx.Identifier{key}.Sanitize()+`::text, `+sel+` FROM `+pgx.Identifier{table}.Sanitize()+` x`)
	require.NoError(t, err)
	out := map[string]json.RawMessage{}
	var k string
	var p json.RawMessage
	_, err = pgx.ForEachRow(rows, []any{&k, &p}, func() error {
		out[k] = append(json.RawMessage(nil), p...)
		return nil
	})
	require.NoError(t, err)
	return out
}

// requireHolds checks that the third party holds exactly want: the same
// ids, each with an equal payload.
func requireHolds(t *testing.T, want, got map[string]json.RawMessage, what string) {
	t.Helper()
	require.Equal(t, keys(want), keys(got), "%s: the ids the third party holds", what)
	for id, p := range want {
		require.JSONEq(t, string(p), string(got[id]), "%s: id %s", what, id)
	}
}

// aliasNames are the aliases, columns and variables of syncer's SQL on a
// source's table (the pending read, the snapshot, the capture function, the
// marks): a column of each name must change nothing of what is sent.
var aliasNames = []string{
	"t", "r", "c", "k", "n", "o", "g", "b", "f", "u", "i", "a", "p", "s",
	"src", "chg", "ins", "done", "found", "num", "key", "seq", "source",
	"version", "payload", "deleted", "changed_at", "error", "armed",
	"lease_until", "syncer_new", "syncer_old", "syncer_source", "syncer_rows",
	"tg_op",
}

// Issue 24, point 1: the issue's own table (items: id, t, qty) exported
// whole sent row 1's t as its payload and a tombstone for row 2, whose t
// is NULL. Here it and a table with a column named after every alias of
// syncer's SQL (keyed by k), whole-row and column-list sources, snapshot
// and live writes, NULLs: the third party holds every live row with its
// exact payload, and tombstones only for the rows deleted.
func TestCaptureColumnsNamedLikeAliases(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	names := []string{"items", "items-cols", "aliases", "aliases-cols"}
	dests := map[string]*destination{}
	var yaml strings.Builder
	yaml.WriteString("destinations:\n")
	for _, n := range names {
		dests[n] = newDestination(t, fakethirdparty.Config{})
		fmt.Fprintf(&yaml, "  %s:\n    url: %s\n", n, dests[n].url)
	}
	b.exec(t, `CREATE TABLE items (id int PRIMARY KEY, t text, qty int)`)
	cols := []string{"k bigint PRIMARY KEY"}
	var listed []string
	for _, c := range aliasNames {
		if c != "k" {
			cols = append(cols, pgx.Identifier{c}.Sanitize()+" text")
			listed = append(listed, c)
		}
	}
	b.exec(t, `CREATE TABLE aliases (`+strings.Join(cols, ", ")+`)`)
	// Rows before the sources: the snapshot sends them.
	b.exec(t, `INSERT INTO items VALUES (1, 'hello', 1), (2, NULL, 2)`)
	b.exec(t, `INSERT INTO aliases (k, t, payload, key) VALUES (1, 'hello', 'p', 'kk'), (2, NULL, NULL, NULL)`)
	fmt.Fprintf(&yaml, `sources:
  - {table: items, key: id, destination: items}
  - {name: items-cols, table: items, key: id, columns: [t, qty], destination: items-cols}
  - {table: aliases, key: k, destination: aliases}
  - {name: aliases-cols, table: aliases, key: k, columns: [%s], destination: aliases-cols}
`, strings.Join(listed, ", "))
	cfg := sourcesConfig(t, yaml.String(), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })
	b.waitSourcesDrained(t, names...)

	// Live writes: NULLs in, out, a delete.
	b.exec(t, `INSERT INTO items VALUES (3, NULL, NULL), (4, 't4', 4)`)
	b.exec(t, `UPDATE items SET t = NULL WHERE id = 1`)
	b.exec(t, `UPDATE items SET t = 'now' WHERE id = 2`)
	b.exec(t, `DELETE FROM items WHERE id = 4`)
	b.exec(t, `INSERT INTO aliases (k) VALUES (3), (4)`)
	b.exec(t, `UPDATE aliases SET t = NULL, found = 'f', deleted = 'no' WHERE k = 1`)
	b.exec(t, `UPDATE aliases SET payload = '{}', version = 'v' WHERE k = 2`)
	b.exec(t, `DELETE FROM aliases WHERE k = 4`)
	b.waitSourcesDrained(t, names...)
	waitFor(t, 30*time.Second, "the tombstones delivered", func() bool {
		for _, n := range names {
			if _, tombs := dests[n].held(t); tombs["4"] == 0 {
				return false
			}
		}
		return true
	})

	items := b.tableRows(t, "items", "id", "to_jsonb(x.*)")
	require.JSONEq(t, `{"id": 1, "t": null, "qty": 1}`, string(items["1"]))
	require.JSONEq(t, `{"id": 2, "t": "now", "qty": 2}`, string(items["2"]))
	require.JSONEq(t, `{"id": 3, "t": null, "qty": null}`, string(items["3"]))
	aliasesCols := b.tableRows(t, "aliases", "k", "to_jsonb(x.*) - 'k'")
	require.Contains(t, string(aliasesCols["1"]), `"found": "f"`)
	want := map[string]map[string]json.RawMessage{
		"items":        items,
		"items-cols":   b.tableRows(t, "items", "id", "jsonb_build_object('t', x.t, 'qty', x.qty)"),
		"aliases":      b.tableRows(t, "aliases", "k", "to_jsonb(x.*)"),
		"aliases-cols": aliasesCols,
	}
	for _, n := range names {
		live, tombs := dests[n].held(t)
		requireHolds(t, want[n], live, n)
		require.Equal(t, map[string]int{"4": 1}, tombs, "%s: one tombstone, for the row deleted", n)
		requireOnceInOrder(t, dests[n].fake)
		st := dests[n].fake.Stats()
		t.Logf("%s: the third party holds %d live rows equal to the table's, tombstones %v; %d requests", n, len(live), tombs, st.Requests)
	}
}

// Issue 24, point 2: on main a DELETE or TRUNCATE on a partition sent no
// tombstone (and an INSERT into one sent nothing). A range-partitioned
// source, two levels deep, written through the table and through its
// partitions, a partition created and one attached (with a row) after
// migrate, TRUNCATEs of a partition and of the table: what the third party
// holds is the table. Until migrate runs again, status warns of the two
// new partitions and the attached row is missing; then it is sent.
func TestCapturePartitionWrites(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE events (id bigint PRIMARY KEY, v text) PARTITION BY RANGE (id)`)
	b.exec(t, `CREATE TABLE p1 PARTITION OF events FOR VALUES FROM (0) TO (100)`)
	b.exec(t, `CREATE TABLE p2 PARTITION OF events FOR VALUES FROM (100) TO (200) PARTITION BY RANGE (id)`)
	b.exec(t, `CREATE TABLE p2a PARTITION OF p2 FOR VALUES FROM (100) TO (150)`)
	b.exec(t, `CREATE TABLE p2b PARTITION OF p2 FOR VALUES FROM (150) TO (200)`)
	b.exec(t, `INSERT INTO events SELECT g, 'before' FROM generate_series(1, 190, 7) g`)
	cfg := sourcesConfig(t, fmt.Sprintf("destinations:\n  one:\n    url: %s\nsources:\n  - {table: events, key: id, destination: one}\n", dest.url), nil)
	b.installSources(t, cfg)
	d := b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg; c.GaugeInterval = 250 * time.Millisecond })
	b.waitSourcesDrained(t, "events")
	whole := func() map[string]json.RawMessage { return b.tableRows(t, "events", "id", "to_jsonb(x.*)") }
	settled := func(what string) (map[string]json.RawMessage, map[string]int) {
		t.Helper()
		b.waitSourcesDrained(t, "events")
		want := whole()
		var live map[string]json.RawMessage
		var tombs map[string]int
		waitFor(t, 30*time.Second, what, func() bool {
			live, tombs = dest.held(t)
			return len(live) == len(want)
		})
		requireHolds(t, want, live, what)
		return live, tombs
	}
	live, _ := settled("snapshot")
	t.Logf("snapshot: %d rows held", len(live))

	// Through the table and through partitions, one and two levels down.
	b.exec(t, `INSERT INTO events VALUES (2, 'a'), (123, 'b'), (160, 'c')`)
	b.exec(t, `INSERT INTO p1 VALUES (3, 'direct')`)
	b.exec(t, `INSERT INTO p2b VALUES (170, 'direct')`)
	b.exec(t, `UPDATE p2a SET v = 'u' WHERE id = 123`)
	b.exec(t, `UPDATE p1 SET v = 'u' WHERE id < 50`)
	b.exec(t, `DELETE FROM p1 WHERE id = 2`)
	b.exec(t, `DELETE FROM p2b WHERE id = 160`)
	b.exec(t, `DELETE FROM p2a WHERE id IN (106, 113)`)
	b.exec(t, `UPDATE events SET id = 199 WHERE id = 3`) // to another partition
	b.exec(t, `UPDATE p2a SET id = 124 WHERE id = 123`)  // a new key
	live, tombs := settled("writes through the table and its partitions")
	require.Equal(t, map[string]int{"2": 1, "3": 1, "106": 1, "113": 1, "123": 1, "160": 1}, tombs)
	t.Logf("writes: %d rows held, tombstones %v", len(live), tombs)

	// A partition created and one attached after migrate.
	b.exec(t, `CREATE TABLE p3 PARTITION OF events FOR VALUES FROM (200) TO (300)`)
	b.exec(t, `CREATE TABLE p4 (id bigint NOT NULL, v text)`)
	b.exec(t, `INSERT INTO p4 VALUES (300, 'brought'), (310, 'brought')`)
	b.exec(t, `ALTER TABLE events ATTACH PARTITION p4 FOR VALUES FROM (300) TO (400)`)
	b.exec(t, `INSERT INTO p3 VALUES (201, 'new'), (202, 'new')`)
	b.exec(t, `INSERT INTO events VALUES (301, 'new'), (302, 'new')`)
	b.exec(t, `UPDATE p4 SET v = 'changed' WHERE id = 310`)
	b.exec(t, `DELETE FROM p4 WHERE id = 301`)
	b.exec(t, `DELETE FROM p3 WHERE id = 202`)
	b.exec(t, `TRUNCATE p1`)
	b.waitSourcesDrained(t, "events")
	waitFor(t, 30*time.Second, "the tombstones of p1's truncate", func() bool {
		_, tombs = dest.held(t)
		return tombs["1"] == 1
	})
	live, tombs = dest.held(t)
	want := whole()
	require.NotContains(t, live, "300", "a row an attached table brought is not captured before migrate")
	delete(want, "300")
	requireHolds(t, want, live, "before migrate")
	rep := b.report(t)
	require.Regexp(t, `partitions t_\w+\.p3, t_\w+\.p4 were attached or created since syncer migrate`, rep.Sources[0].Warning)
	t.Logf("new partitions: %d rows held, %d tombstones; status warns: %s", len(live), len(tombs), rep.Sources[0].Warning)
	waitFor(t, 30*time.Second, "syncer_source_uncaptured_partitions", func() bool {
		return strings.Contains(metricsText(t, d.addr), `syncer_source_uncaptured_partitions{destination="one",source="events"} 2`)
	})

	// migrate: p3 and p4 get their TRUNCATE trigger, the snapshot sends 300.
	b.installSources(t, cfg)
	live, tombs = settled("after migrate")
	require.Contains(t, live, "300")
	require.Empty(t, b.report(t).Sources[0].Warning)
	waitFor(t, 30*time.Second, "syncer_source_uncaptured_partitions back to 0", func() bool {
		return strings.Contains(metricsText(t, d.addr), `syncer_source_uncaptured_partitions{destination="one",source="events"} 0`)
	})
	b.exec(t, `TRUNCATE p3`)
	live, tombs = settled("a new partition truncated")
	require.Equal(t, 1, tombs["201"])
	b.exec(t, `TRUNCATE events`)
	live, tombs = settled("the table truncated")
	require.Empty(t, live)
	requireOnceInOrder(t, dest.fake)
	require.Zero(t, dest.fake.Stats().DuplicatesOtherKey)
	t.Logf("after TRUNCATE events: %d rows held, %d ids tombstoned, %d tombstones, %d requests",
		len(live), len(tombs), sum(tombs), dest.fake.Stats().Requests)
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Issue 24, point 4 (the 6): on main a source's table dropped
// while the daemon ran went unnoticed (status healthy, 0 pending): nothing
// is written, so no change ever comes. Three sources; one table dropped
// and one renamed mid-run: each stops loudly (an error log line, status's
// error, syncer_source_stopped 1) within seconds, and the third goes on.
func TestCaptureTableDroppedOrRenamedMidRun(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	for _, tbl := range []string{"orders", "notes", "tags"} {
		b.exec(t, `CREATE TABLE `+tbl+` (id bigint PRIMARY KEY, v text)`)
	}
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  one:
    url: %s
sources:
  - {table: orders, key: id, destination: one}
  - {table: notes, key: id, destination: one}
  - {table: tags, key: id, destination: one}
`, dest.url), nil)
	b.installSources(t, cfg)
	logs := &dbtest.Buffer{}
	d := b.startDaemon(t, func(c *daemon.Config) {
		c.Sources = cfg
		// Not shorter: each refresh must finish within it, on a busy
		// machine too.
		c.GaugeInterval = 250 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	b.exec(t, `INSERT INTO orders VALUES (1, 'o')`)
	b.exec(t, `INSERT INTO tags VALUES (100, 't')`)
	b.exec(t, `INSERT INTO notes VALUES (1000, 'n')`)
	b.waitSourcesDrained(t, "orders", "notes", "tags")
	// Idle, as in the issue: no source job left to stumble on the drop.
	waitFor(t, 30*time.Second, "the source jobs done", func() bool {
		return b.scalar(t, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'source' <> $2
			AND state NOT IN ('completed', 'discarded', 'cancelled')`, jobs.ExportArgs{}.Kind(), jobs.Resources) == 0
	})

	dropped := time.Now()
	b.exec(t, `DROP TABLE orders`)
	b.exec(t, `ALTER TABLE tags RENAME TO tags_old`)
	var stoppedAfter time.Duration
	waitFor(t, 30*time.Second, "both sources stopped in status", func() bool {
		st := b.sourceStats(t)
		stoppedAfter = time.Since(dropped)
		return st["orders"].Error != "" && st["tags"].Error != ""
	})
	rep := b.report(t)
	errs := map[string]string{}
	for _, s := range rep.Sources {
		errs[s.Name] = s.Error
	}
	require.Contains(t, errs["orders"], "table "+b.schemaName(t)+".orders no longer exists")
	require.Contains(t, errs["tags"], "table "+b.schemaName(t)+".tags was renamed to "+b.schemaName(t)+".tags_old")
	require.Empty(t, errs["notes"])
	require.Contains(t, logs.String(), `level=ERROR msg="exporter: source stopped: its table no longer matches its configuration" source=orders`)
	require.Contains(t, logs.String(), `source=tags`)
	waitFor(t, 30*time.Second, "syncer_source_stopped", func() bool {
		text := metricsText(t, d.addr)
		return strings.Contains(text, `syncer_source_stopped{destination="one",source="orders"} 1`) &&
			strings.Contains(text, `syncer_source_stopped{destination="one",source="tags"} 1`) &&
			strings.Contains(text, `syncer_source_stopped{destination="one",source="notes"} 0`)
	})

	// The other source goes on.
	b.exec(t, `INSERT INTO notes VALUES (1001, 'after')`)
	b.exec(t, `DELETE FROM notes WHERE id = 1000`)
	b.waitSourcesDrained(t, "notes")
	waitFor(t, 30*time.Second, "notes exported", func() bool {
		_, tombs := dest.held(t)
		return tombs["1000"] == 1
	})
	live, tombs := dest.held(t)
	require.JSONEq(t, `{"id": 1001, "v": "after"}`, string(live["1001"]))
	t.Logf("stopped in status %.1fs after the drop and rename; the third source went on: %d live, tombstones %v",
		stoppedAfter.Seconds(), len(live), tombs)
}

// schemaName is the test's schema, as the daemon's messages print it.
func (b *bundle) schemaName(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&s))
	return s
}
