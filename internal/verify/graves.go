package verify

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/history"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
)

// A key deleted here is gone from its table once its tombstone was
// exported (a configured source forgets it at once, the resources'
// tombstones are purged after their retention), yet the third party may
// hold it again: a person re-created it, an import brought it back. The
// row's story (internal/history) still names it for the history's
// retention, so a run reads those keys back after the table's: the
// graves. A grave still held there is a zombie, healed by a new tombstone.

// graveyard is a Source that names the keys deleted here whose
// tombstones the third party answered for.
type graveyard interface {
	// Graves returns the next keys after the cursor after ("" for the
	// first) that the story says were deleted and that are not in the
	// table now (those are checked with it), each Gone: Failed when the
	// tombstone was rejected, Pending when a change of it waits. last is
	// the next cursor; done is set after the last key.
	Graves(ctx context.Context, q database.Querier, after string, limit int) (keys []Here, last string, done bool, err error)
}

// graveMark starts a saved cursor that is past the table's keys, among
// the graves: a unit separator, which no key's text holds (keys are
// compared to it only as progress, never as keys).
const graveMark = "\x1fgraves\x1f"

func graveCursor(after string) (string, bool) { return strings.CutPrefix(after, graveMark) }

// graveChunk is how many graves one read of the story returns: each read
// goes through every request that carried a tombstone of the feed, so the
// graves are read in chunks and served a page at a time.
const graveChunk = 20_000

// graveBuffer serves the graves read in a chunk a page at a time.
type graveBuffer struct {
	// at is the cursor the buffer serves from; stones the graves after
	// it; last and done the chunk's (history.Tombstones).
	at     string
	stones []history.Tombstone
	filled bool
	last   string
	done   bool
}

// page returns up to limit graves after the cursor after, the next cursor
// and whether they are the last.
func (b *graveBuffer) page(ctx context.Context, q database.Querier, feed, tenant, after string, limit int) ([]history.Tombstone, string, bool, error) {
	if !b.filled || after != b.at {
		stones, last, done, err := history.Tombstones(ctx, q, feed, tenant, after, graveChunk)
		if err != nil {
			return nil, "", false, err
		}
		*b = graveBuffer{at: after, stones: stones, filled: true, last: last, done: done}
	}
	n := min(limit, len(b.stones))
	out := b.stones[:n]
	b.stones = b.stones[n:]
	if len(b.stones) > 0 {
		b.at = out[n-1].Key
		return out, b.at, false, nil
	}
	b.filled = false
	return out, b.last, b.done, nil
}

func heresOf(stones []history.Tombstone) []Here {
	out := make([]Here, len(stones))
	for i, s := range stones {
		out[i] = Here{ID: s.Key, Gone: true, Failed: s.Outcome == history.Failed}
		if s.Outcome == history.Accepted {
			out[i].Accepted = s.Version
		}
	}
	return out
}

// Graves reads the resources' graves: ids deleted, their tombstones
// purged since.
func (s *Resources) Graves(ctx context.Context, q database.Querier, after string, limit int) ([]Here, string, bool, error) {
	stones, last, done, err := s.buf.page(ctx, q, jobs.Resources, "", after, limit)
	if err != nil {
		return nil, "", false, err
	}
	var ids []int64
	byID := map[int64]history.Tombstone{}
	for _, st := range stones {
		id, err := strconv.ParseInt(st.Key, 10, 64)
		if err != nil || id < s.from || id > s.to || strconv.FormatInt(id, 10) != st.Key {
			continue
		}
		ids = append(ids, id)
		byID[id] = st
	}
	held, err := resources.HeldOf(ctx, q, ids)
	if err != nil {
		return nil, "", false, err
	}
	for _, id := range held {
		delete(byID, id)
	}
	var keep []history.Tombstone
	for _, id := range ids {
		if st, ok := byID[id]; ok {
			keep = append(keep, st)
		}
	}
	if s.graves == nil {
		s.graves = map[int64]int64{}
	}
	for _, st := range keep {
		id, _ := strconv.ParseInt(st.Key, 10, 64)
		s.graves[id] = st.Version
	}
	return heresOf(keep), last, done, nil
}

// Graves reads the source's graves: keys deleted (for the tenant, when
// set) and gone from the table.
func (c *Configured) Graves(ctx context.Context, q database.Querier, after string, limit int) ([]Here, string, bool, error) {
	stones, last, done, err := c.buf.page(ctx, q, c.src.Name, c.tenant.String(), after, limit)
	if err != nil {
		return nil, "", false, err
	}
	var keys []string
	for _, st := range stones {
		if c.src.KeyInRange(st.Key, c.r) {
			keys = append(keys, st.Key)
		}
	}
	present, err := sources.PresentOf(ctx, q, c.src, c.tenant, keys)
	if err != nil {
		return nil, "", false, err
	}
	var keep []history.Tombstone
	for _, st := range stones {
		if c.src.KeyInRange(st.Key, c.r) && !slices.Contains(present, st.Key) {
			keep = append(keep, st)
		}
	}
	out := heresOf(keep)
	if len(out) > 0 {
		ids := make([]string, len(out))
		for i := range out {
			ids[i] = out[i].ID
		}
		pending, err := c.PendingOf(ctx, q, ids)
		if err != nil {
			return nil, "", false, err
		}
		for i := range out {
			out[i].Pending = slices.Contains(pending, out[i].ID)
		}
	}
	return out, last, done, nil
}

// nextPage reads the page of keys after the cursor after: the table's
// keys, then, for a graveyard, its graves. It returns the next cursor and
// whether the run is done.
func nextPage(ctx context.Context, q database.Querier, src Source, after string, limit int) ([]Here, string, bool, error) {
	g, graves := src.(graveyard)
	if rest, ok := graveCursor(after); ok && graves {
		keys, last, done, err := g.Graves(ctx, q, rest, limit)
		return keys, graveMark + last, done, err
	}
	keys, err := src.Page(ctx, q, after, limit)
	if err != nil {
		return nil, "", false, err
	}
	next, done := after, len(keys) < limit
	if len(keys) > 0 {
		next = keys[len(keys)-1].ID
	}
	if done && graves {
		return keys, graveMark, false, nil
	}
	return keys, next, done, nil
}
