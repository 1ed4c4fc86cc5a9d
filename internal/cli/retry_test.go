package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRetryFailedCompositeKey: retry-failed --key takes a composite key as
// one JSON array, commas and all (kong split it at its comma, so the call
// the help text shows matched nothing and said "0 ... eligible again"),
// and says how many keys named were failed and what became of the others.
func TestRetryFailedCompositeKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, false)
	_, err := b.pool.Exec(ctx, `CREATE TABLE contacts (org text, email text, name text, PRIMARY KEY (org, email))`)
	require.NoError(t, err)
	cfg := filepath.Join(t.TempDir(), "syncer.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`destinations:
  crm:
    url: http://127.0.0.1:1
sources:
  - table: contacts
    key: [org, email]
    destination: crm
`), 0o600))
	db := []string{"--database-url", b.dsn, "--log-level", "error"}
	cmd := func(args ...string) result { return run(ctx, append(args, db...)...) }
	r := cmd("migrate", "--config", cfg)
	require.Equal(t, 0, r.code, r.stderr)

	_, err = b.pool.Exec(ctx, `INSERT INTO contacts VALUES ('acme', 'ann@acme.io', 'Ann'), ('acme', 'bob@acme.io', 'Bob')`)
	require.NoError(t, err)
	// Ann's row was refused by the third party: failed, not pending.
	const ann = `["acme","ann@acme.io"]`
	_, err = b.pool.Exec(ctx, `DELETE FROM syncer_changes WHERE source = 'contacts';
		INSERT INTO syncer_source_failures (source, key, version, error) VALUES ('contacts', '`+ann+`', 1, 'refused')`)
	require.NoError(t, err)
	state := func() (failed, pending int) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM syncer_source_failures WHERE source = 'contacts' AND key = $1),
			(SELECT count(*) FROM syncer_changes WHERE source = 'contacts' AND key = $1)`, ann).Scan(&failed, &pending))
		return failed, pending
	}

	r = cmd("retry-failed", "--source", "contacts", "--key", ann)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "source contacts: 1 of 1 key named was failed; 1 failed key is eligible again\n", r.stdout)
	failed, pending := state()
	require.Equal(t, 0, failed, "the key's failure is cleared")
	require.Equal(t, 1, pending, "the key is pending again")

	// Ann's key again (now pending), Bob's (never failed), one that no row
	// has, written with a space; and Bob's twice: counted once.
	r = cmd("retry-failed", "--source", "contacts", "--key", ann, "--key=[\"acme\",\"bob@acme.io\"]",
		"--key", `["acme", "nobody@acme.io"]`, "--key", `["acme","bob@acme.io"]`)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "source contacts: 0 of 3 keys named were failed; 0 failed keys are eligible again\n"+
		"  key "+ann+": not failed (pending or synced), left alone\n"+
		`  key ["acme","bob@acme.io"]: not failed (pending or synced), left alone`+"\n"+
		`  key ["acme","nobody@acme.io"]: not found: no row of the source has this key`+"\n", r.stdout)

	// Not a key of the source: exit 2, one line naming the flag and the key.
	r = cmd("retry-failed", "--source", "contacts", "--key", `["acme"]`)
	require.Equal(t, 2, r.code)
	oneLine(t, r, "--key of source contacts")
	r = cmd("retry-failed", "--source", "nope", "--key", ann)
	require.Equal(t, 1, r.code)
	oneLine(t, r, "no source nope is installed")
	oneLine(t, r, "installed: contacts")
}
