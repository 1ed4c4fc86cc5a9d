package cli_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/breakerstore"
)

// syncer probe: a destination nothing holds has nothing to probe (exit
// 0); a held one that no daemon probes within --wait is said so (exit 1).
func TestProbeSaysWhenNothingAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupConfigured(t, ordersDDL, ordersToCRM)

	r := run(ctx, "probe", "--database-url", b.dsn, "--destination", "crm")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "destination crm: nothing to probe: neither its credentials nor its URL are refused (see syncer status)\n", r.stdout)

	crm, err := breakerstore.New(b.pool, &breakerstore.Config{Namespace: breakerstore.DestinationNamespace("crm")})
	require.NoError(t, err)
	_, err = crm.SetRefusal(ctx, breakerstore.KeyCredentials, breakerstore.Refusal{Refused: true, Status: 401, Message: "401 Unauthorized"})
	require.NoError(t, err)
	r = run(ctx, "probe", "--database-url", b.dsn, "--destination", "crm", "--wait", "300ms")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stdout, "destination crm: no daemon answered within 300ms")
	require.Contains(t, r.stderr, "destination crm: no answer within 300ms")
	st, err := crm.Load(ctx)
	require.NoError(t, err)
	require.False(t, st.Probe.At.IsZero(), "the probe was asked")

	r = run(ctx, "probe", "--database-url", b.dsn, "--destination", "nowhere")
	require.Equal(t, 2, r.code, r.stderr)
	r = run(ctx, "probe", "--database-url", b.dsn, "--destination", "crm", "--wait", "0s")
	require.Equal(t, 2, r.code, r.stderr)
}
