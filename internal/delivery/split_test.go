package delivery_test

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
)

func TestSplitOnTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{MaxBatchItems: 3}, "")
	d := b.deliverer(t, nil, nil)

	its := items(1, 10, nil)
	out, err := d.Deliver(t.Context(), batch("s1", its))
	require.NoError(t, err)
	require.Empty(t, out.Rejected)
	require.ElementsMatch(t, ids(its), ids(out.Accepted))
	st := b.fake.Stats()
	require.EqualValues(t, 10, st.DistinctPairs)
	require.Zero(t, st.DuplicatePairs)
	requireOnlyAccepted(t, b.fake, out.Accepted)

	// The halves' keys derive from the installation, the salt and their
	// body: a resend after a crash takes the same path under the same keys.
	firstKeys := map[string]bool{}
	for _, r := range b.fake.Requests() {
		firstKeys[r.Key] = true
	}
	require.True(t, firstKeys[bodyKey("s1", its[:5])])
	require.True(t, firstKeys[bodyKey("s1", its[5:])])
	_, err = d.Deliver(t.Context(), batch("s1", its))
	require.NoError(t, err)
	for _, r := range b.fake.Requests()[len(firstKeys):] {
		require.True(t, firstKeys[r.Key], "resend used a new key %s", r.Key)
	}
	require.Zero(t, b.fake.Stats().DuplicatePairs)

	// Another installation's halves never share a key with ours.
	other := newDeliverer(t, b.client, nil, &delivery.Config{Installation: "another"})
	before := len(b.fake.Requests())
	_, err = other.Deliver(t.Context(), delivery.Batch{Salt: "s1", Items: its})
	require.NoError(t, err)
	for _, r := range b.fake.Requests()[before:] {
		require.False(t, firstKeys[r.Key], "two installations share key %s", r.Key)
	}
}

func TestPoisonItemIsRejectedAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{PoisonField: "poison"}, "")
	logs := &recorder{}
	d := b.deliverer(t, nil, &delivery.Config{Logger: slog.New(logs)})

	its := items(1, 9, func(i int) string {
		if i == 6 {
			return `{"poison": true}`
		}
		return `{"ok": 1}`
	})
	out, err := d.Deliver(t.Context(), batch("", its))
	require.NoError(t, err)
	require.Len(t, out.Rejected, 1)
	require.Equal(t, "6", out.Rejected[0].Item.ID)
	require.Equal(t, "refused as a whole: 400 batch holds an item with field poison", out.Rejected[0].Error)
	require.Len(t, out.Accepted, 8)
	require.EqualValues(t, 8, b.fake.Stats().DistinctPairs)
	requireOnlyAccepted(t, b.fake, out.Accepted)
	// The refusal is said once at warn with its status, not once per half.
	require.Equal(t, 1, logs.countMsgLevel("delivery: the third party refused a batch as a whole; splitting it", slog.LevelWarn))
	require.Equal(t, int64(400), logs.attr("delivery: the third party refused a batch as a whole; splitting it", "status").Int64())
}

func TestRefusalsDoNotTripTheBreaker(t *testing.T) {
	t.Parallel()
	b := setup(t, fakethirdparty.Config{PoisonField: "poison"}, "")
	d := b.deliverer(t, nil, &delivery.Config{BreakerFailures: 1})
	its := items(1, 2, func(int) string { return `{"poison": 1}` })
	out, err := deliverJudged(t, d, batch("", its))
	require.NoError(t, err)
	require.Len(t, out.Rejected, 2)
	out, err = d.Deliver(t.Context(), batch("", items(10, 2, nil)))
	require.NoError(t, err)
	require.Len(t, out.Accepted, 2)
}
