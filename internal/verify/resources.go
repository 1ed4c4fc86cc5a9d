package verify

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
	"github.com/syncer-dev/syncer/internal/outbox"
	"github.com/syncer-dev/syncer/internal/resources"
)

// Resources is the resources table as a Source: its rows and tombstones
// by id, through the resources package.
type Resources struct {
	from, to int64
	// graves are the versions of the tombstones of the graves read
	// (Graves), by id, for Heal to write the next.
	graves map[int64]int64
	buf    graveBuffer
}

var _ Source = (*Resources)(nil)

// NewResources returns the resources source over r (ids in decimal; an
// empty bound is open).
func NewResources(r Range) (*Resources, error) {
	s := &Resources{from: math.MinInt64, to: math.MaxInt64}
	var err error
	if r.FromKey != "" {
		if s.from, err = strconv.ParseInt(r.FromKey, 10, 64); err != nil {
			return nil, fmt.Errorf("from key %q: resources ids are integers", r.FromKey)
		}
	}
	if r.ToKey != "" {
		if s.to, err = strconv.ParseInt(r.ToKey, 10, 64); err != nil {
			return nil, fmt.Errorf("to key %q: resources ids are integers", r.ToKey)
		}
	}
	if s.from > s.to {
		return nil, fmt.Errorf("from key %d is above to key %d", s.from, s.to)
	}
	return s, nil
}

// Name is jobs.Resources.
func (s *Resources) Name() string { return jobs.Resources }

// Page reads the next rows and tombstones.
func (s *Resources) Page(ctx context.Context, q database.Querier, after string, limit int) ([]Here, error) {
	from := s.from
	if after != "" {
		a, err := strconv.ParseInt(after, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cursor %q: %w", after, err)
		}
		if a == math.MaxInt64 {
			return nil, nil
		}
		from = a + 1
	}
	held, err := resources.HeldPage(ctx, q, from, s.to, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Here, len(held))
	for i, h := range held {
		out[i] = Here{ID: strconv.FormatInt(h.ID, 10), Payload: h.Payload, Gone: h.Deleted, Pending: h.Pending, Failed: h.Failed}
		if h.Synced {
			out[i].Accepted = h.Version
		}
	}
	return out, nil
}

func idNums(ids []string) ([]int64, error) {
	nums := make([]int64, len(ids))
	for i, id := range ids {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("id %q: %w", id, err)
		}
		nums[i] = n
	}
	return nums, nil
}

// PendingOf asks the resources package.
func (s *Resources) PendingOf(ctx context.Context, q database.Querier, ids []string) ([]string, error) {
	nums, err := idNums(ids)
	if err != nil {
		return nil, err
	}
	pending, err := resources.PendingOf(ctx, q, nums)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(pending))
	for i, n := range pending {
		out[i] = strconv.FormatInt(n, 10)
	}
	return out, nil
}

// Heal resends the ids and wakes the daemons.
func (s *Resources) Heal(ctx context.Context, tx pgx.Tx, ids []string) (int64, error) {
	nums, err := idNums(ids)
	if err != nil {
		return 0, fmt.Errorf("heal: %w", err)
	}
	n, err := resources.Resend(ctx, tx, nums)
	if err != nil {
		return n, err
	}
	// A zombie whose tombstone was purged is buried again: a new
	// tombstone above the one the third party accepted.
	var gone, versions []int64
	for _, id := range nums {
		if v, ok := s.graves[id]; ok {
			gone, versions = append(gone, id), append(versions, v)
		}
	}
	buried, err := resources.Rebury(ctx, tx, gone, versions)
	if err != nil {
		return n, err
	}
	if n += buried; n == 0 {
		return 0, nil
	}
	// The versions changed but no payload did: no trigger woke anyone.
	return n, outbox.Wake(ctx, tx, jobs.Resources)
}

// AnyPending asks the resources package.
func (s *Resources) AnyPending(ctx context.Context, q database.Querier) (bool, error) {
	return resources.AnyPending(ctx, q)
}
