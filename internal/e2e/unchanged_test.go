package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// Issue 45: a version whose body is the one the third party last accepted
// for its key is settled as skipped, with no request: a source's row
// changed and changed back in one transaction, a row of resources whose
// payload went and came back, and a key deleted again after its tombstone
// was accepted (gone, brought back and deleted before it went out). The
// fakes receive nothing; the rows are synced; status counts the skips. An
// update of a column the source does not export writes no change at all.
// A replay of the source, an explicit re-export, still sends its rows.
func TestUnchangedBodyIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{})
	dest := newDestination(t, fakethirdparty.Config{})
	b.exec(t, `CREATE TABLE notes (id bigint PRIMARY KEY, body text, seen_at timestamptz)`)
	cfg := sourcesConfig(t, fmt.Sprintf(`destinations:
  crm:
    url: %s
sources:
  - {table: notes, key: id, columns: [body], destination: crm}
`, dest.url), nil)
	b.installSources(t, cfg)
	b.startDaemon(t, func(c *daemon.Config) { c.Sources = cfg })

	b.exec(t, `INSERT INTO notes VALUES (1, 'a', now()), (2, 'b', now())`)
	b.exec(t, `INSERT INTO resources (id, payload) VALUES (1, '{"a": 1}'), (2, '{"b": 2}')`)
	b.waitSourcesDrained(t, "notes")
	b.waitDrained(t, 30*time.Second)
	srcReqs, resReqs := dest.fake.Stats().Requests, b.fake.Stats().Requests
	require.Positive(t, srcReqs)
	require.Positive(t, resReqs)

	// Not a change at all: no change row is written.
	b.exec(t, `UPDATE notes SET seen_at = now()`)
	var changes int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM syncer_changes WHERE source = 'notes'`).Scan(&changes))
	require.Zero(t, changes, "no change row for an unexported column")

	// Changed and changed back, deleted again: new versions, same bodies.
	b.exec(t, `BEGIN; UPDATE notes SET body = 'x' WHERE id = 1; UPDATE notes SET body = 'a' WHERE id = 1; COMMIT`)
	b.exec(t, `BEGIN; UPDATE resources SET payload = '{"a": 9}' WHERE id = 1; UPDATE resources SET payload = '{"a":1}' WHERE id = 1; COMMIT`)
	b.exec(t, `DELETE FROM notes WHERE id = 2`)
	b.exec(t, `DELETE FROM resources WHERE id = 2`)
	b.waitSourcesDrained(t, "notes")
	b.waitDrained(t, 30*time.Second)
	srcReqs, resReqs = dest.fake.Stats().Requests, b.fake.Stats().Requests // the tombstones went
	b.exec(t, `BEGIN; INSERT INTO notes VALUES (2, 'b2', now()); DELETE FROM notes WHERE id = 2; COMMIT`)
	b.exec(t, `BEGIN; INSERT INTO resources (id, payload) VALUES (2, '{"b": 3}'); DELETE FROM resources WHERE id = 2; COMMIT`)
	b.exec(t, `BEGIN; UPDATE notes SET body = 'y' WHERE id = 1; UPDATE notes SET body = 'a' WHERE id = 1; COMMIT`)
	waitFor(t, 30*time.Second, "the skips counted", func() bool {
		r := b.report(t)
		skipped := map[string]int64{}
		for _, s := range r.Sources {
			skipped[s.Name] = s.SkippedUnchanged
		}
		return skipped["notes"] >= 3 && skipped["resources"] >= 2 && r.SkippedUnchanged == skipped["notes"]+skipped["resources"] &&
			r.Pending == 0
	})
	require.Equal(t, srcReqs, dest.fake.Stats().Requests, "no request for an unchanged body of a source")
	require.Equal(t, resReqs, b.fake.Stats().Requests, "no request for an unchanged body of resources")
	require.Contains(t, b.syncer(t, "status"), "skipped unchanged (no request)")

	// A replay re-exports whatever the third party has.
	before := len(byID(dest.fake)["1"])
	b.syncer(t, "replay", "--source", "notes", "--wait")
	waitFor(t, 30*time.Second, "the replay sent key 1", func() bool { return len(byID(dest.fake)["1"]) > before })
	requireOnceInOrder(t, dest.fake)
}
