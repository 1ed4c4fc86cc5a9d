package exporter

import (
	"cmp"
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/syncer-dev/syncer/internal/checkpoint"
	"github.com/syncer-dev/syncer/internal/compose"
	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/feed"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/sources"
	"github.com/syncer-dev/syncer/internal/unchanged"
)

// Feed is one exported stream as the pipeline knows it: resources' live
// rows, a replay's range of them, or a configured source's keys. Every
// feed answers the same questions, so a rule of the pipeline (records,
// keys, limits, the largest item) holds for all of them. The package that
// owns a feed's tables holds its SQL; the feeds here only translate.
type Feed interface {
	// Checkpoint names the feed's progress and its recorded batches.
	Checkpoint() string
	// Limits bound each page the feed reads.
	Limits() feed.Limits
	// Open starts a pass after pos: feed.Start, or a position the feed's
	// checkpoint recorded (feed.Page.Position).
	Open(pos int64) Cursor
	// QueueMarks queues on b the statements that write the outcomes of
	// the feed's items, accepted and rejected (with their errors), to be
	// sent with the rest of a marker transaction in one round trip.
	QueueMarks(b *pgx.Batch, accepted, rejected []feed.Item, errs []string) error
}

// Cursor reads one pass of a feed, page after page, in the feed's order.
type Cursor interface {
	// Next returns the next page; an empty one (feed.Page.Empty) ends the
	// pass.
	Next(ctx context.Context) (feed.Page, error)
	// Ended reports whether the last page read reached the feed's end:
	// the next Next returns an empty page without reading.
	Ended() bool
}

// Destination is where a feed's batches go: a configured destination or
// the resources' third party, with its own limits, state and metrics.
type Destination interface {
	// Deliver pushes one batch, handling retries, splits and the rate.
	Deliver(ctx context.Context, b delivery.Batch) (*delivery.Outcome, error)
	// MaxInFlight is the most batches pushed to it and unanswered at once:
	// the destination's own setting, which bounds each pipeline that
	// pushes to it.
	MaxInFlight() int
}

var _ Destination = (*delivery.Deliverer)(nil)

// rowsFeed is resources, the live export or a replay: both read rows and
// tombstones of resources by id and mark them there.
type rowsFeed struct {
	name string
	lim  feed.Limits
	// read returns the rows after an id, the salt of their keys, and
	// whether they reached the feed's end, in scratch's array when it has
	// room (the cursor's, from one page to the next).
	read func(ctx context.Context, after int64, lim feed.Limits, scratch []resources.Row) ([]resources.Row, string, bool, error)
	// kept says that read returns the rows' kept digests (Page.Kept).
	kept bool
}

// liveFeed is resources' live export. With kept, the feed's name in
// internal/unchanged, its rows come with their kept digests.
func (e *Exporter) liveFeed(lim feed.Limits, kept string) *rowsFeed {
	return &rowsFeed{name: checkpoint.Live, lim: lim, kept: kept != "", read: func(ctx context.Context, after int64, lim feed.Limits, scratch []resources.Row) ([]resources.Row, string, bool, error) {
		var p resources.Page
		var err error
		if kept != "" {
			p, err = resources.PendingKept(ctx, e.pool, after, lim, scratch)
		} else {
			p, err = resources.Pending(ctx, e.pool, after, lim, scratch)
		}
		return p.Rows, resources.LiveSalt(p.Gen), p.End, err
	}}
}

// replayFeed reads a replay's range. A salt of its own: the third party
// must not take a replay for a retry of the original export.
func (e *Exporter) replayFeed(id int64, f resources.Filter, lim feed.Limits) *rowsFeed {
	salt := fmt.Sprintf("replay-%d", id)
	return &rowsFeed{name: checkpoint.Replay(id), lim: lim, read: func(ctx context.Context, after int64, lim feed.Limits, scratch []resources.Row) ([]resources.Row, string, bool, error) {
		rows, err := resources.Matching(ctx, e.pool, f, after, lim, scratch)
		return rows, salt, false, err
	}}
}

func (f *rowsFeed) Checkpoint() string  { return f.name }
func (f *rowsFeed) Limits() feed.Limits { return f.lim }

func (f *rowsFeed) Open(pos int64) Cursor { return &rowsCursor{f: f, after: pos} }

type rowsCursor struct {
	f     *rowsFeed
	after int64
	end   bool // the last page reached the feed's end
	// rows is the last page's rows, whose array the next read reuses:
	// a page's items copy what they keep of its rows (the payloads are
	// slices of the read's own buffer), and a new array a page was 130
	// bytes of a drained row (issue 55).
	rows []resources.Row
}

func (c *rowsCursor) Ended() bool { return c.end }

func (c *rowsCursor) Next(ctx context.Context) (feed.Page, error) {
	if c.end {
		return feed.Page{}, nil
	}
	clear(c.rows) // the last page's payloads and digests are not kept alive
	rows, salt, end, err := c.f.read(ctx, c.after, c.f.lim, c.rows[:0])
	if err != nil || len(rows) == 0 {
		return feed.Page{}, err
	}
	c.rows = rows
	c.end = end
	p := feed.Page{Salt: salt, Items: make([]feed.Item, 0, len(rows)), Kept: c.f.kept}
	var metas []feed.Meta
	for _, r := range rows {
		id := strconv.FormatInt(r.ID, 10)
		if r.Oversize > 0 {
			p.Oversize = append(p.Oversize, feed.Oversize{ID: id, Version: r.Version, Bytes: r.Oversize})
			continue
		}
		it := feed.Item{ID: id, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted, Meta: feed.MetaOf(&metas, len(rows), "", r.Kept)}
		it.SetCaptured(r.Captured)
		p.Items = append(p.Items, it)
	}
	c.after = rows[len(rows)-1].ID
	p.Position = c.after
	return p, nil
}

func (f *rowsFeed) QueueMarks(b *pgx.Batch, accepted, rejected []feed.Item, errs []string) error {
	var o resources.Outcomes
	for _, it := range accepted {
		id, err := rowID(it)
		if err != nil {
			return err
		}
		if it.Deleted {
			o.SyncedTombstones.Add(id, it.Version)
		} else {
			o.Synced.Add(id, it.Version)
		}
	}
	for i, it := range rejected {
		id, err := rowID(it)
		if err != nil {
			return err
		}
		if it.Deleted {
			o.FailedTombstones.Add(id, it.Version)
			o.TombstoneErrs = append(o.TombstoneErrs, errs[i])
		} else {
			o.Failed.Add(id, it.Version)
			o.Errs = append(o.Errs, errs[i])
		}
	}
	resources.QueueMarks(b, o)
	return nil
}

// composeAccepted adds to s the marks of accepted, every one a row's
// version, none a tombstone (composer): their ids and versions go once,
// as the keys and versions of every piece of s, and the digests, if any,
// are kept on the rows by the marks' UPDATE.
func (f *rowsFeed) composeAccepted(s *compose.Statement, accepted []feed.Item, digests *unchanged.Digests) (keys, versions string, err error) {
	var v resources.Versions
	v.IDs, v.Versions = make([]int64, 0, len(accepted)), make([]int64, 0, len(accepted))
	for _, it := range accepted {
		id, err := rowID(it)
		if err != nil {
			return "", "", err
		}
		v.Add(id, it.Version)
	}
	ids := s.Arg(v.IDs)
	versions = s.Arg(v.Versions)
	sums := ""
	if digests.Len() > 0 {
		sums = s.Arg(digests.Flat())
	}
	resources.ComposeSynced(s, ids, versions, sums, unchanged.DigestLen)
	return resources.KeysSQL(ids), versions + `::bigint[]`, nil
}

// QueueLive makes the rows a replay's answer deferred pending again in the
// live export, at the versions replayed: the live export sends them (under
// its own keys), and holds them if they are deferred again. A row that
// changed since is pending already.
func (f *rowsFeed) QueueLive(b *pgx.Batch, deferred []delivery.Deferral) error {
	var rows, tombstones resources.Versions
	for _, df := range deferred {
		id, err := rowID(feed.Item{ID: df.Item.ID})
		if err != nil {
			return err
		}
		if df.Item.Deleted {
			tombstones.Add(id, df.Item.Version)
		} else {
			rows.Add(id, df.Item.Version)
		}
	}
	resources.QueueUnsynced(b, rows, tombstones)
	return nil
}

// rowID is the row id an item of resources carries.
func rowID(it feed.Item) (int64, error) {
	id, err := strconv.ParseInt(it.ID, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("exporter: item %q of resources: not a row id: %w", it.ID, err)
	}
	return id, nil
}

// sourceFeed is a configured source's pending keys. A pass always reads
// from its first pending key (a key marked leaves the change log), so its
// pages have no position (0).
type sourceFeed struct {
	pool *pgxpool.Pool
	src  *sources.Source
	lim  feed.Limits
	// kept says that the reads return the keys' kept digests
	// (sources.PendingKept, Page.Kept).
	kept bool
}

func (e *Exporter) sourceFeed(src *sources.Source, batchSize int) *sourceFeed {
	return &sourceFeed{pool: e.pool, src: src, lim: e.limits(batchSize)}
}

func (f *sourceFeed) Checkpoint() string  { return checkpoint.Source(f.src.Name) }
func (f *sourceFeed) Limits() feed.Limits { return f.lim }

func (f *sourceFeed) Open(int64) Cursor { return &sourceCursor{f: f} }

type sourceCursor struct {
	f     *sourceFeed
	after *string // nil before the first key
	end   bool    // the last page reached the feed's end
}

func (c *sourceCursor) Ended() bool { return c.end }

func (c *sourceCursor) Next(ctx context.Context) (feed.Page, error) {
	if c.end {
		return feed.Page{}, nil
	}
	after, first := "", c.after == nil
	if !first {
		after = *c.after
	}
	var sp sources.Page
	var err error
	if c.f.kept {
		sp, err = sources.PendingKept(ctx, c.f.pool, c.f.src, sources.Scope{}, after, first, c.f.lim)
	} else {
		sp, err = sources.Pending(ctx, c.f.pool, c.f.src, after, first, c.f.lim)
	}
	rows := sp.Rows
	if err != nil || len(rows) == 0 {
		return feed.Page{}, err
	}
	c.end = sp.End
	p := feed.Page{Salt: c.f.Checkpoint(), Items: make([]feed.Item, 0, len(rows)), Kept: c.f.kept}
	var metas []feed.Meta
	for _, r := range rows {
		if r.Oversize > 0 {
			p.Oversize = append(p.Oversize, feed.Oversize{ID: r.Key, Version: r.Version, Bytes: r.Oversize})
			continue
		}
		it := feed.Item{ID: r.Key, Version: r.Version, Payload: r.Payload, Deleted: r.Deleted, Meta: feed.MetaOf(&metas, len(rows), "", r.Kept)}
		it.SetCaptured(r.Captured)
		p.Items = append(p.Items, it)
	}
	last := rows[len(rows)-1].Key
	c.after = &last
	return p, nil
}

func (f *sourceFeed) QueueMarks(b *pgx.Batch, accepted, rejected []feed.Item, errs []string) error {
	keys, versions := wire(accepted)
	rkeys, rversions := wire(rejected)
	return sources.QueueMarks(b, f.src, sources.Scope{}, keys, versions, rkeys, rversions, errs)
}

// composeAccepted adds to s the marks of accepted, none a tombstone
// (composer): a pass's one statement deletes their changes, writes their
// story and keeps their digests, where it sent three (issue 57), their
// keys and versions sent once for all.
func (f *sourceFeed) composeAccepted(s *compose.Statement, accepted []feed.Item, _ *unchanged.Digests) (keys, versions string, err error) {
	ks, vs := wire(accepted)
	return sources.ComposeSynced(s, f.src, ks, vs)
}

func wire(items []feed.Item) ([]string, []int64) {
	keys, versions := make([]string, len(items)), make([]int64, len(items))
	for i, it := range items {
		keys[i], versions[i] = it.ID, it.Version
	}
	return keys, versions
}

// limits are the pages' limits of every feed (the defaults are applied by
// New), with items per page (a source's own batch size) when set.
func (e *Exporter) limits(items int) feed.Limits {
	return feed.Limits{Items: cmp.Or(items, e.cfg.BatchSize), Bytes: e.cfg.BatchMaxBytes, MaxItemBytes: e.cfg.MaxItemBytes}
}

var (
	_ Feed     = (*rowsFeed)(nil)
	_ Feed     = (*sourceFeed)(nil)
	_ composer = (*sourceFeed)(nil)
)
