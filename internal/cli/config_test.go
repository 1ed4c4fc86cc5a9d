package cli_test

import (
	"bytes"
	"context"
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
	require.Equal(t, "syncer: --config (SYNCER_CONFIG) "+bad+": sources[0] (orders): key: required: the table's single-column primary key (line 6)\n", errOut)
	code, _, errOut = migrate("--config", filepath.Join(dir, "missing.yaml"))
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "missing.yaml: no such file\n")

	// A table that cannot be a source: exit 1, naming it; nothing changed.
	refused := write("refused.yaml", head+"  - table: nopk\n    key: id\n    destination: crm\n")
	code, _, errOut = migrate("--config", refused)
	require.Equal(t, 1, code)
	require.Equal(t, 1, strings.Count(errOut, "\n"))
	require.Contains(t, errOut, "syncer: migrate: source nopk: table ")
	require.Contains(t, errOut, "has no primary key")

	// A source removed from the file is uninstalled.
	empty := write("other.yaml", head+"  - table: orders\n    key: id\n    columns: [status]\n    destination: crm\n    name: orders-status\n")
	code, out, errOut = migrate("--config", empty)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "source orders-status: installed\n")
	require.Contains(t, out, "source orders: removed\n")
}
