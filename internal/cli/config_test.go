package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/cli"
	"github.com/syncer-dev/syncer/internal/dbtest"
)

func TestMigrateInstallsTheConfiguredSources(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _ := dbtest.NewSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, status text); CREATE TABLE nopk (id int)`)
	require.NoError(t, err)

	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return path
	}
	const head = "destinations:\n  crm:\n    url: https://crm.example.com\n    token_env: CRM_TOKEN_NOT_SET_IN_TESTS\nsources:\n"
	good := write("good.yaml", head+"  - table: orders\n    key: id\n    destination: crm\n")
	migrate := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cli.Main(ctx, append([]string{"migrate", "--database-url", dsn, "--log-level", "error"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	// migrate needs no token: the variable is not set here.
	code, out, errOut := migrate("--config", good)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "source orders: installed\n")

	code, out, _ = migrate("--config", good)
	require.Equal(t, 0, code)
	require.Contains(t, out, "is up to date")

	// Without --config the installed sources are left alone, and said so.
	code, out, _ = migrate()
	require.Equal(t, 0, code)
	require.Contains(t, out, "1 sources installed and left as they are")

	// A bad file: exit 2, one line naming the file, the source and the field.
	bad := write("bad.yaml", head+"  - table: orders\n    destination: crm\n")
	code, _, errOut = migrate("--config", bad)
	require.Equal(t, 2, code)
	require.Equal(t, "syncer: --config (SYNCER_CONFIG) "+bad+": sources[0] (orders): key: required: the table's primary key (a column, or a list of its columns) (line 6)\n", errOut)
	code, _, errOut = migrate("--config", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "missing.yaml: no such file\n")

	// A table without a primary key cannot be a source: exit 2 (section
	// 7), one line naming it; nothing changed.
	refused := write("refused.yaml", head+"  - table: nopk\n    key: id\n    destination: crm\n")
	code, _, errOut = migrate("--config", refused)
	require.Equal(t, 2, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"))
	require.Contains(t, errOut, "syncer: source nopk: table ")
	require.Contains(t, errOut, "has no primary key")

	// A source removed from the file is uninstalled.
	empty := write("other.yaml", head+"  - table: orders\n    key: id\n    columns: [status]\n    destination: crm\n    name: orders-status\n")
	code, out, errOut = migrate("--config", empty)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "source orders-status: installed\n")
	require.Contains(t, out, "source orders: removed\n")
}

// retry-failed --source, replay --source and status per source; run with a
// source that migrate has not installed exits 1 saying what to run.
func TestSourceCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _ := dbtest.NewSchema(t)
	pool, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE orders (id bigint PRIMARY KEY, status text); CREATE TABLE notes (id text PRIMARY KEY)`)
	require.NoError(t, err)
	dir := t.TempDir()
	const head = "destinations:\n  crm:\n    url: http://127.0.0.1:1\nsources:\n  - table: orders\n    key: id\n    destination: crm\n"
	cfg := filepath.Join(dir, "sources.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(head), 0o600))
	more := filepath.Join(dir, "more.yaml")
	require.NoError(t, os.WriteFile(more, []byte(head+"  - table: notes\n    key: id\n    destination: crm\n"), 0o600))
	cmd := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		full := append([]string{args[0], "--database-url", dsn, "--log-level", "error"}, args[1:]...)
		code := cli.Main(ctx, full, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, _, errOut := cmd("migrate", "--config", cfg)
	require.Equal(t, 0, code, errOut)

	_, err = pool.Exec(ctx, `INSERT INTO orders SELECT g, 'new' FROM generate_series(1, 3) g`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO syncer_source_failures (source, key, num, version, error) VALUES ('orders', '9', 9, 1, 'refused')`)
	require.NoError(t, err)

	code, out, errOut := cmd("status", "--json")
	require.Equal(t, 0, code, errOut)
	var st struct {
		Pending int64 `json:"pending"`
		Failed  int64 `json:"failed"`
		Sources []struct {
			Name     string `json:"name"`
			Table    string `json:"table"`
			Pending  int64  `json:"pending"`
			Failed   int64  `json:"failed"`
			Snapshot string `json:"snapshot"`
		} `json:"sources"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Len(t, st.Sources, 1)
	require.Equal(t, "orders", st.Sources[0].Name)
	require.Equal(t, int64(3), st.Sources[0].Pending)
	require.Equal(t, int64(1), st.Sources[0].Failed)
	require.Equal(t, int64(3), st.Pending, "the contract's keys are the sums")
	require.Equal(t, int64(1), st.Failed)
	code, out, errOut = cmd("status")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "source orders")

	code, out, errOut = cmd("retry-failed", "--source", "orders")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "1 failed key is eligible again")
	var pending int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM syncer_changes WHERE source = 'orders' AND key = '9'`).Scan(&pending))
	require.Equal(t, 1, pending)
	code, _, errOut = cmd("retry-failed", "--source", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no source nope is installed")
	code, _, _ = cmd("retry-failed", "--source", "orders", "--id", "1")
	require.Equal(t, 2, code)

	_, err = pool.Exec(ctx, `UPDATE syncer_sources SET snapshot_state = 'done'`)
	require.NoError(t, err)
	code, out, errOut = cmd("replay", "--source", "orders", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "would send 3 keys of source orders\n", out)
	code, out, errOut = cmd("replay", "--source", "orders")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^replay \d+ created: 3 keys of source orders; running daemons will send them\n$`, out)

	code, _, errOut = cmd("run", "--config", more, "--thirdparty-url", "http://127.0.0.1:1", "--http-addr", "off")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "source notes")
	require.Contains(t, errOut, "syncer migrate")
	// A configuration alone needs no --thirdparty-url; neither is a usage
	// error naming both.
	code, _, errOut = cmd("run", "--config", more, "--http-addr", "off")
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "source notes")
	code, _, errOut = cmd("run", "--http-addr", "off")
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "--thirdparty-url (SYNCER_THIRDPARTY_URL) is required (or --config (SYNCER_CONFIG))")
}
