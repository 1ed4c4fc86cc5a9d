package delivery

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// TestApplyKeepsTheItemsOfAWholeAnswer: a request answered whole, the
// batch's one request most often, gives its items as they are, not a copy
// of them (a copy of every item of a drain was 4% of what it allocated),
// and a second request's items are appended, never written over the
// first's.
func TestApplyKeepsTheItemsOfAWholeAnswer(t *testing.T) {
	t.Parallel()
	items := make([]thirdparty.Item, 10)
	for i := range items {
		items[i].ID, items[i].Version = strconv.Itoa(i), 1
	}
	var out Outcome
	apply(nil, items[:5], &out)
	require.Len(t, out.Accepted, 5)
	require.Same(t, &items[0], &out.Accepted[0], "the items themselves")
	require.Equal(t, 5, cap(out.Accepted), "a full cap: an append copies")

	apply(&thirdparty.Result{}, items[5:], &out)
	require.Len(t, out.Accepted, 10)
	require.NotSame(t, &items[0], &out.Accepted[0])
	for i, it := range out.Accepted {
		require.Equal(t, strconv.Itoa(i), it.ID)
	}
	require.Equal(t, "5", items[5].ID, "the second request's items untouched")
}
