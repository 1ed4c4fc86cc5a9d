package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/daemon"
	"github.com/syncer-dev/syncer/internal/formats"
	"github.com/syncer-dev/syncer/internal/formats/custom"
	"github.com/syncer-dev/syncer/internal/formats/standardwebhooks"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// webhookSecret signs the standard-webhooks requests of these tests.
const webhookSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// formatE2E is one format with the path its requests take on the fake and
// the YAML of its destination fields.
type formatE2E struct {
	name string
	path string
	spec formats.Spec
	yaml string
}

var formatsE2E = []formatE2E{
	{"syncer", "", formats.Spec{}, ""},
	{"cloudevents", "/events", formats.Spec{Name: "cloudevents"}, "    format: cloudevents\n"},
	{"elasticsearch", "/orders", formats.Spec{Name: "elasticsearch"}, "    format: elasticsearch\n"},
	{"standard-webhooks", "/hooks", formats.Spec{Name: "standard-webhooks", Settings: standardwebhooks.Settings{SigningSecret: formats.Secret{Value: webhookSecret}}},
		"    format: standard-webhooks\n    signing_secret_env: HOOKS_SECRET\n    max_in_flight: 16\n"},
	{"custom", "/crm/v3/objects/contacts", formats.Spec{Name: "custom", Settings: custom.Config{
		Request:  custom.Request{Path: "/batch/upsert", Body: `{inputs: [.items[] | {id, version, properties: .payload}]}`},
		Deletes:  &custom.Request{Path: "/batch/archive", Body: `{inputs: [.items[] | {id, version}]}`},
		Accepted: `.status == 204 or .body.status == "COMPLETE"`,
		Rejected: `[.body.errors[]? | {id: .context.ids[0], error: .message}]`,
	}}, `    format: custom
    request:
      path: /batch/upsert
      body: '{inputs: [.items[] | {id, version, properties: .payload}]}'
    deletes:
      path: /batch/archive
      body: '{inputs: [.items[] | {id, version}]}'
    response:
      accepted: '.status == 204 or .body.status == "COMPLETE"'
      rejected: '[.body.errors[]? | {id: .context.ids[0], error: .message}]'
`},
}

const oddTag = "a/b c?#%é"

// TestFormatsMixEndToEnd sends the same mix of writes in every format, to
// the fake speaking it: resources (inserts, an update, a delete and the id
// brought back, a row the third party refuses) and a text-keyed source
// (a key with / space ? # % and a non-ASCII letter), with 5xx and 429
// along the way. The receiver ends holding exactly the tables, every
// (id, version) once and in order, the refused row failed with the third
// party's own text.
func TestFormatsMixEndToEnd(t *testing.T) {
	t.Parallel()
	for _, tc := range formatsE2E {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{})
			fakeCfg := fakethirdparty.Config{Format: tc.name, SigningSecret: webhookSecret, RejectField: "bad", FailureRate: 0.2, Seed: 11}
			dest := newDestination(t, fakeCfg)
			url := dest.url + tc.path
			b.exec(t, `CREATE TABLE tags (name text PRIMARY KEY, color text)`)
			cfg := sourcesConfig(t, fmt.Sprintf("destinations:\n  dest:\n    url: %s\n%ssources:\n  - table: tags\n    key: name\n    destination: dest\n",
				url, tc.yaml), map[string]string{"HOOKS_SECRET": webhookSecret})
			b.installSources(t, cfg)
			b.startDaemon(t, func(c *daemon.Config) {
				c.ThirdParty.URL = url
				c.Format = tc.spec
				c.Sources = cfg
				c.Exporter.BatchSize = 3
				c.Delivery.BackoffInitial = 5 * time.Millisecond
				c.Delivery.BackoffMax = 50 * time.Millisecond
				c.Delivery.BreakerFailures = 1000
			})

			b.exec(t, `INSERT INTO resources (id, payload) SELECT g, jsonb_build_object('n', g) FROM generate_series(1, 8) g`)
			b.exec(t, `INSERT INTO resources (id, payload) VALUES (9, '{"bad": true}')`)
			b.exec(t, `INSERT INTO tags VALUES ($1, 'odd'), ('plain', 'p'), ('gone', 'g')`, oddTag)
			b.waitAllSynced(t, time.Minute)
			b.waitSourcesDrained(t, "tags")
			waitFor(t, 30*time.Second, "first tags", func() bool { return len(byID(dest.fake)[oddTag]) == 1 })
			// A 429 with Retry-After on the way.
			fakeCfg.RateLimit, fakeCfg.RateBurst, fakeCfg.RetryAfter = 20, 1, time.Second
			dest.fake.SetConfig(fakeCfg)
			b.exec(t, `UPDATE resources SET payload = '{"n": 22}' WHERE id = 2`)
			b.exec(t, `DELETE FROM resources WHERE id = 3`)
			b.exec(t, `UPDATE tags SET color = 'odder' WHERE name = $1`, oddTag)
			b.exec(t, `DELETE FROM tags WHERE name = 'gone'`)
			b.waitAllSynced(t, time.Minute)
			b.waitSourcesDrained(t, "tags")
			waitFor(t, 30*time.Second, "tombstone of 3", func() bool { return len(byID(dest.fake)["3"]) >= 2 })
			b.exec(t, `INSERT INTO resources (id, payload) VALUES (3, '{"n": 33}')`)
			b.waitAllSynced(t, time.Minute)
			b.waitSourcesDrained(t, "tags")

			// The receiver holds exactly the tables.
			rows, err := b.pool.Query(context.Background(), `SELECT id::text, version FROM resources WHERE synced_at IS NOT NULL
				UNION ALL SELECT id::text, version FROM syncer_tombstones WHERE synced_at IS NOT NULL AND id NOT IN (SELECT id FROM resources)`)
			require.NoError(t, err)
			want := map[string]int64{}
			for rows.Next() {
				var id string
				var v int64
				require.NoError(t, rows.Scan(&id, &v))
				want[id] = v
			}
			require.NoError(t, rows.Err())
			got := map[string]int64{}
			for id, dls := range byID(dest.fake) {
				last := dls[len(dls)-1]
				if _, isTag := map[string]bool{oddTag: true, "plain": true, "gone": true}[id]; !isTag {
					got[id] = last.Version
				}
			}
			require.Equal(t, want, got)
			tags := byID(dest.fake)
			require.Equal(t, []string{"1", "2", "3", "4", "5", "6", "7", "8", oddTag, "gone", "plain"}, keys(tags))
			require.True(t, tags["gone"][len(tags["gone"])-1].Deleted)
			require.Len(t, tags[oddTag], 2)
			require.True(t, tags["3"][1].Deleted)
			require.False(t, tags["3"][2].Deleted)
			requireOnceInOrder(t, dest.fake)
			st := dest.fake.Stats()
			require.Zero(t, st.KeyBodyConflicts, "one key, one body")
			require.Positive(t, st.RequestsByStatus["429"]+st.RequestsByStatus["503"], "failures along the way")

			var text string
			require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT sync_error FROM resources WHERE id = 9 AND failed_at IS NOT NULL`).Scan(&text))
			require.Contains(t, text, "field bad is not allowed", "the third party's own text")
			t.Logf("%s: %d requests, by status %v", tc.name, st.Requests, st.RequestsByStatus)
		})
	}
}

// TestFormatsSIGKILLMidDrain kills the daemon twice during a drain in each
// format and checks that no key was ever sent with two bodies: the
// recorded batch (and its recorded time) makes every resend the same
// bytes.
func TestFormatsSIGKILLMidDrain(t *testing.T) {
	t.Parallel()
	bin := syncerBinary(t)
	for _, tc := range formatsE2E {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, fakethirdparty.Config{})
			fake := fakethirdparty.New(fakethirdparty.Config{Format: tc.name, SigningSecret: webhookSecret, Latency: 3 * time.Millisecond})
			srv := httptest.NewServer(fake)
			t.Cleanup(srv.Close)
			t.Cleanup(fake.Close)
			const rows = 3000
			b.exec(t, `CREATE TABLE tags (name text PRIMARY KEY, color text)`)
			b.exec(t, `INSERT INTO tags SELECT 'k/' || g, 'c' FROM generate_series(1, $1) g`, rows)
			dir := t.TempDir()
			cfgPath := filepath.Join(dir, "syncer.yaml")
			require.NoError(t, os.WriteFile(cfgPath, fmt.Appendf(nil,
				"destinations:\n  dest:\n    url: %s\n%ssources:\n  - table: tags\n    key: name\n    destination: dest\n    batch_size: 100\n",
				srv.URL+tc.path, tc.yaml), 0o600))
			env := append(os.Environ(), "HOOKS_SECRET="+webhookSecret)
			migrate := exec.Command(bin, "migrate", "--database-url", b.dsn, "--config", cfgPath)
			migrate.Env = env
			out, err := migrate.CombinedOutput()
			require.NoError(t, err, "%s", out)

			start := func() *exec.Cmd {
				cmd := exec.Command(bin, "run", "--database-url", b.dsn, "--config", cfgPath,
					"--http-addr", freePort(t), "--log-level", "error")
				cmd.Env = env
				cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
				require.NoError(t, cmd.Start())
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				return cmd
			}
			cmd := start()
			for _, at := range []int64{600, 1500} {
				waitFor(t, time.Minute, "items arriving", func() bool { return fake.Stats().ItemsAccepted >= at })
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				_ = cmd.Wait()
				cmd = start()
			}
			waitFor(t, 2*time.Minute, "all delivered", func() bool { return len(byID(fake)) == rows })
			st := fake.Stats()
			require.Zero(t, st.KeyBodyConflicts, "no key sent with two bodies")
			require.Zero(t, st.KeyConflicts)
			require.Zero(t, st.DuplicatesOtherKey, "a resend goes under its key")
			requireOnceInOrder(t, fake)
			t.Logf("%s: %d requests, %d key replays, %d version conflicts", tc.name, st.Requests, st.KeyReplays, st.VersionConflicts)
		})
	}
}
