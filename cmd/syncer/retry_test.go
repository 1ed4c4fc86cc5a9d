package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

// The call of issue 42, typed in a shell as the help text shows it: the
// composite key's comma used to split it into two keys that matched
// nothing, "0 failed keys are eligible again", exit 0.
func TestRetryFailedCompositeKeyFromAShell(t *testing.T) {
	t.Parallel()
	e := setup(t, fakethirdparty.Config{})
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `CREATE TABLE contacts (org text, email text, PRIMARY KEY (org, email));
		INSERT INTO contacts VALUES ('acme', 'ann@acme.io')`)
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("destinations:\n  crm:\n    url: "+e.fakeURL+
		"\nsources:\n  - table: contacts\n    key: [org, email]\n    destination: crm\n"), 0o600))
	r := run(t, []string{"DATABASE_URL=" + e.dsn}, "migrate", "--config", cfg)
	require.Equal(t, 0, r.code, r.stderr)
	_, err = e.pool.Exec(ctx, `DELETE FROM syncer_changes WHERE source = 'contacts';
		INSERT INTO syncer_source_failures (source, key, version, error) VALUES ('contacts', '["acme","ann@acme.io"]', 1, 'refused')`)
	require.NoError(t, err)

	sh := exec.Command("/bin/sh", "-c", `"$SYNCER" retry-failed --source contacts --key '["acme","ann@acme.io"]'`)
	sh.Env = cleanEnv("DATABASE_URL="+e.dsn, "SYNCER="+binary)
	out, err := sh.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "source contacts: 1 of 1 key named was failed; 1 failed key is eligible again\n", string(out))
	var failed, pending int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM syncer_source_failures), (SELECT count(*) FROM syncer_changes WHERE key = '["acme","ann@acme.io"]')`).Scan(&failed, &pending))
	require.Equal(t, 0, failed)
	require.Equal(t, 1, pending)
}
