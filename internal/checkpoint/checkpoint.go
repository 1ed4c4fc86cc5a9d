// Package checkpoint records where each export job is (the live sync and
// every replay) and the batches it recorded before pushing them.
//
// Guarantees:
//   - A batch is recorded, with its exact request body and Idempotency-Key,
//     in a committed transaction before it is pushed, and forgotten in the
//     transaction that marks its outcome. So after a crash the batches that
//     may have reached the third party unanswered are exactly the recorded
//     ones, and the next holder of the export lock sends them again byte for
//     byte under their keys: one key, one body.
//   - A checkpoint's position is written with the records, on the
//     connection that holds the export lock: every row at or before it was
//     either marked or is in a recorded batch, so resuming after it skips
//     nothing and repeats only recorded batches.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/klauspost/compress/s2"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/jobs"
)

// Live is the checkpoint name of the live sync.
const Live = "live"

// Replay returns the checkpoint name of a replay.
func Replay(id int64) string { return replayPrefix + strconv.FormatInt(id, 10) }

// Source returns the checkpoint name of a configured source.
func Source(name string) string { return sourcePrefix + name }

const (
	replayPrefix = "replay:"
	sourcePrefix = "source:"
)

// Kind is the kind of feed a checkpoint is the position of.
type Kind int

const (
	// KindLive is resources' live sync (Live), and any name not made here.
	KindLive Kind = iota
	// KindReplay is a replay of resources (Replay).
	KindReplay
	// KindSource is a configured source (Source).
	KindSource
)

// Owner is whose a checkpoint is: the kind of feed, and which one.
type Owner struct {
	Kind Kind
	// ReplayID is the replay's id, for KindReplay.
	ReplayID int64
	// Source is the source's name, for KindSource: a lane's checkpoint
	// (a source with a tenant column) is its source's.
	Source string
	// Lane is the lane, for a lane's checkpoint (Laned); 0 otherwise.
	Lane  int
	Laned bool
}

// OwnerOf reads a checkpoint name back into its owner. Names are made by
// Live, Replay and Source; this is the one place that reads them, so a
// recorded batch (which keeps only its checkpoint's name) says whose it
// is without anyone else parsing a prefix.
func OwnerOf(name string) Owner {
	if src, ok := strings.CutPrefix(name, sourcePrefix); ok {
		if name, lane, ok := jobs.LaneOf(src); ok {
			return Owner{Kind: KindSource, Source: name, Lane: lane, Laned: true}
		}
		return Owner{Kind: KindSource, Source: src}
	}
	if rest, ok := strings.CutPrefix(name, replayPrefix); ok {
		if id, err := strconv.ParseInt(rest, 10, 64); err == nil {
			return Owner{Kind: KindReplay, ReplayID: id}
		}
	}
	return Owner{Kind: KindLive}
}

// Batch is a batch recorded before its push.
type Batch struct {
	// Name is the checkpoint the batch belongs to.
	Name string
	// Seq orders recorded batches and names one; set by Record.
	Seq int64
	Key string
	// Salt derived Key, and derives the keys of the batch's halves if the
	// third party makes it split.
	Salt string
	// Items is how many items Body holds.
	Items int
	// Time is when the batch was made (recorded_at): destination formats
	// whose bodies carry a time use it, so a resend is byte-identical. It
	// is stored to the microsecond; give it whole seconds (or
	// microseconds) to read back what was written. Zero records the time
	// of recording.
	Time time.Time
	// Body is the exact request body. It is stored compressed (S2's block
	// format): a batch's JSON shrinks several times at about a gigabyte a
	// second, which costs the marks' connection far less than sending it
	// whole for PostgreSQL to compress.
	Body []byte
}

// Checkpoint is one job's position.
type Checkpoint struct {
	Name string
	// Positioned is false until the job recorded its first batch; LastID
	// means nothing before.
	Positioned bool
	// LastID is the id of the last row of the last batch recorded: every
	// row of the job's source up to it was marked or is in a recorded batch.
	LastID      int64
	RowsDone    int64
	BatchesDone int64
	RowsFailed  int64
	// InFlight is how many batches are recorded and not marked.
	InFlight  int
	StartedAt time.Time
	UpdatedAt time.Time
}

// Get returns the named checkpoint; a missing one is the zero position.
func Get(ctx context.Context, db database.Querier, name string) (Checkpoint, error) {
	cp := Checkpoint{Name: name}
	err := db.QueryRow(ctx, `SELECT last_id, rows_done, batches_done, rows_failed,
			(SELECT count(*) FROM syncer_batches b WHERE b.checkpoint = c.name), started_at, updated_at
		FROM syncer_checkpoints c WHERE name = $1`, name).
		Scan(&cp.LastID, &cp.RowsDone, &cp.BatchesDone, &cp.RowsFailed, &cp.InFlight, &cp.StartedAt, &cp.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, nil
	}
	if err != nil {
		return cp, fmt.Errorf("checkpoint: get %s: %w", name, err)
	}
	cp.Positioned = true
	return cp, nil
}

// QueueRecord adds to b the statements that record batches about to be
// pushed, in order, and move the checkpoint's position to lastID, the last
// row of the last of them; the batches' sequence numbers are stored in
// *seqs when b's results are read. Send b on the export lock's session
// (locks.Pipe). bs[i].Name is ignored: a call records one
// checkpoint's batches.
//
// p, when not zero, is the counts of batches of the same checkpoint
// marked in the same transaction, added in the statement that moves its
// position (QueueAdvance's work): the checkpoint's row is written once a
// transaction, where a look that writes outcomes and a record wrote it
// twice.
//
// It packs into buffers of its own; a caller that records transaction
// after transaction keeps a Packer instead.
func QueueRecord(b *pgx.Batch, name string, lastID int64, bs []Batch, seqs *[]int64, p Progress) {
	new(Packer).QueueRecord(b, name, lastID, bs, seqs, p)
}

// Packer is QueueRecord with buffers kept from one call to the next: the
// compression's scratch (a bit more than the largest body), the packed
// bodies and the statement's arrays. The exporter's marker records a
// transaction's batches every few milliseconds of a drain, and a scratch
// and copies a transaction were most of what it allocated (about 45 MB
// over a drain of 100,000 rows).
//
// What a call queues points into the Packer's buffers until its next
// call: encode b (pgx's SendBatch, locks.Pipe's Send, both encode the
// arguments before they return) before calling it again. The zero Packer
// is ready; one is for one goroutine.
type Packer struct {
	scratch []byte // s2's worst case for the largest body packed
	packed  []byte // this call's packed bodies, end to end
	keys    []string
	salts   []string
	items   []int32
	bodies  [][]byte
	times   []time.Time
}

// QueueRecord is the package's QueueRecord, packing into pk's buffers.
func (pk *Packer) QueueRecord(b *pgx.Batch, name string, lastID int64, bs []Batch, seqs *[]int64, p Progress) {
	if len(bs) == 0 {
		return
	}
	clear(pk.keys[:cap(pk.keys)]) // the last record's strings are not kept alive
	clear(pk.salts[:cap(pk.salts)])
	pk.keys, pk.salts, pk.items = pk.keys[:0], pk.salts[:0], pk.items[:0]
	pk.bodies, pk.times, pk.packed = pk.bodies[:0], pk.times[:0], pk.packed[:0]
	// Bodies are packed into the scratch, and their packed bytes (several
	// times smaller) appended end to end: the Packer keeps one worst case
	// and what the last record needed, no more. An append that grows
	// packed leaves the bodies before it in the old array, still whole.
	for _, bt := range bs {
		if need := s2.MaxEncodedLen(len(bt.Body)); need > cap(pk.scratch) {
			pk.scratch = make([]byte, need)
		}
		enc := s2.Encode(pk.scratch[:cap(pk.scratch)], bt.Body)
		start := len(pk.packed)
		pk.packed = append(pk.packed, enc...)
		t := bt.Time
		if t.IsZero() {
			t = time.Now()
		}
		pk.keys, pk.salts, pk.items = append(pk.keys, bt.Key), append(pk.salts, bt.Salt), append(pk.items, int32(bt.Items))
		pk.bodies, pk.times = append(pk.bodies, pk.packed[start:len(pk.packed):len(pk.packed)]), append(pk.times, t)
	}
	// Bodies appended to a packed that grew later point into its old
	// array: re-slice them all from the final one, so the last record's
	// array is the only one kept.
	off := 0
	for i := range pk.bodies {
		n := len(pk.bodies[i])
		pk.bodies[i] = pk.packed[off : off+n : off+n]
		off += n
	}
	b.Queue(recordSQL, name, pk.keys, pk.salts, pk.items, pk.bodies, pk.times).Fn = func(br pgx.BatchResults) error {
		rows, _ := br.Query()
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("checkpoint: record %s: %w", name, err)
		}
		*seqs = got
		return nil
	}
	queueExec(b, "position "+name, positionSQL, name, lastID, p.Rows, p.Batches, p.Failed)
}

const recordSQL = `INSERT INTO syncer_batches (checkpoint, key, salt, items, body, recorded_at)
	SELECT $1, k, s, n, b, t FROM unnest($2::text[], $3::text[], $4::int[], $5::bytea[], $6::timestamptz[]) WITH ORDINALITY AS u(k, s, n, b, t, o)
	ORDER BY o RETURNING seq`

const positionSQL = `INSERT INTO syncer_checkpoints AS c (name, last_id, rows_done, batches_done, rows_failed)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (name) DO UPDATE SET last_id = EXCLUDED.last_id,
		rows_done = c.rows_done + EXCLUDED.rows_done,
		batches_done = c.batches_done + EXCLUDED.batches_done,
		rows_failed = c.rows_failed + EXCLUDED.rows_failed,
		updated_at = now()`

// queueExec adds a statement whose error is wrapped with what it did.
func queueExec(b *pgx.Batch, what, sql string, args ...any) {
	b.Queue(sql, args...).Fn = func(br pgx.BatchResults) error {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("checkpoint: %s: %w", what, err)
		}
		return nil
	}
}

// SetPosition moves the named checkpoint's position back to lastID, when
// batches recorded after it were forgotten unsent.
func SetPosition(ctx context.Context, db database.Querier, name string, lastID int64) error {
	if _, err := db.Exec(ctx, `UPDATE syncer_checkpoints SET last_id = $2, updated_at = now() WHERE name = $1`, name, lastID); err != nil {
		return fmt.Errorf("checkpoint: position %s: %w", name, err)
	}
	return nil
}

// Forget removes recorded batches: marked ones, or ones never sent.
func Forget(ctx context.Context, db database.Querier, seqs []int64) error {
	if len(seqs) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, forgetSQL, seqs); err != nil {
		return fmt.Errorf("checkpoint: forget batches: %w", err)
	}
	return nil
}

// QueueForget adds Forget's statement to b.
func QueueForget(b *pgx.Batch, seqs []int64) {
	if len(seqs) > 0 {
		queueExec(b, "forget batches", forgetSQL, seqs)
	}
}

const forgetSQL = `DELETE FROM syncer_batches WHERE seq = ANY($1)`

// Recorded returns every job's recorded batches in the order they were
// recorded: batches of different jobs may hold the same rows, and must go
// again in that order.
func Recorded(ctx context.Context, db database.Querier) ([]Batch, error) {
	rows, err := db.Query(ctx, `SELECT checkpoint, seq, key, salt, items, body, recorded_at FROM syncer_batches ORDER BY seq`)
	return collectRecorded(rows, err)
}

// RecordedOf returns the batches recorded under checkpoint name, in the
// order they were recorded.
func RecordedOf(ctx context.Context, db database.Querier, name string) ([]Batch, error) {
	rows, err := db.Query(ctx, `SELECT checkpoint, seq, key, salt, items, body, recorded_at FROM syncer_batches
		WHERE checkpoint = $1 ORDER BY seq`, name)
	return collectRecorded(rows, err)
}

func collectRecorded(rows pgx.Rows, err error) ([]Batch, error) {
	if err != nil {
		return nil, fmt.Errorf("checkpoint: recorded batches: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Batch, error) {
		var b Batch
		var n int32
		var packed []byte
		if err := r.Scan(&b.Name, &b.Seq, &b.Key, &b.Salt, &n, &packed, &b.Time); err != nil {
			return b, err
		}
		b.Items = int(n)
		body, err := s2.Decode(nil, packed)
		if err != nil {
			return b, fmt.Errorf("batch %d (%s): body: %w", b.Seq, b.Key, err)
		}
		b.Body = body
		return b, nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: recorded batches: %w", err)
	}
	return out, nil
}

// Progress is what marked batches add to a checkpoint.
type Progress struct {
	Rows    int64
	Failed  int64
	Batches int64
}

// QueueAdvance adds to b the statement that adds marked batches' counts to
// the named checkpoint.
func QueueAdvance(b *pgx.Batch, name string, p Progress) {
	queueExec(b, "advance "+name, advanceSQL, name, p.Rows, p.Batches, p.Failed)
}

const advanceSQL = `INSERT INTO syncer_checkpoints AS c (name, rows_done, batches_done, rows_failed)
	VALUES ($1, $2, $3, $4)
	ON CONFLICT (name) DO UPDATE SET
		rows_done = c.rows_done + EXCLUDED.rows_done,
		batches_done = c.batches_done + EXCLUDED.batches_done,
		rows_failed = c.rows_failed + EXCLUDED.rows_failed,
		updated_at = now()`

// List returns every checkpoint, for status.
func List(ctx context.Context, q database.Querier) ([]Checkpoint, error) {
	rows, err := q.Query(ctx, `SELECT name, last_id, rows_done, batches_done, rows_failed,
			(SELECT count(*) FROM syncer_batches b WHERE b.checkpoint = c.name), started_at, updated_at
		FROM syncer_checkpoints c ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) {
		cp := Checkpoint{Positioned: true}
		err := r.Scan(&cp.Name, &cp.LastID, &cp.RowsDone, &cp.BatchesDone, &cp.RowsFailed, &cp.InFlight, &cp.StartedAt, &cp.UpdatedAt)
		return cp, err
	})
}

// Installation returns the installation's identity, made by the migrations
// and never changed: it salts every Idempotency-Key.
func Installation(ctx context.Context, db database.Querier) (string, error) {
	var id string
	if err := db.QueryRow(ctx, `SELECT id FROM syncer_installation`).Scan(&id); err != nil {
		return "", fmt.Errorf("checkpoint: installation id: %w", err)
	}
	return id, nil
}
