package verify

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/syncer-dev/syncer/internal/database"
	"github.com/syncer-dev/syncer/internal/tenant"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Kind is what a key was found to be.
type Kind string

// The kinds, as docs/protocol.md names them.
const (
	OK      Kind = "ok"
	Missing Kind = "missing"
	Stale   Kind = "stale"
	Zombie  Kind = "zombie"
	// Failed is a key whose latest version the third party rejected: it is
	// not expected to hold it, and sending it again unchanged would be
	// rejected again, so it is not drift and --heal leaves it alone
	// (`syncer retry-failed` sends it again once the cause is fixed).
	Failed  Kind = "failed"
	Unknown Kind = "unknown"
	Pending Kind = "pending"
)

// drift reports whether a key of kind k drifted: it is healed by --heal
// and makes the exit status 3.
func (k Kind) drift() bool { return k == Missing || k == Stale || k == Zombie }

// Here is one key as the database holds it.
type Here struct {
	// ID is the key in its text form, as items carry it.
	ID string
	// Accepted is the version the third party last accepted; 0 when the
	// database does not know it (a configured source forgets the version
	// once synced).
	Accepted int64
	// Payload is the item's payload as it would be sent; nil when Gone.
	Payload json.RawMessage
	// Gone is set for a key deleted here (a tombstone) or filtered out:
	// the third party should not hold it.
	Gone bool
	// Pending is set while the key's latest change is still to be
	// exported.
	Pending bool
	// Failed is set when the key's latest version was rejected by the
	// third party.
	Failed bool
}

// Source is the database side of a run, backed by the source's owner
// package (see Resources and Configured).
type Source interface {
	// Name is the source's name.
	Name() string
	// Page returns up to limit keys in key order: the first ones of the
	// range when after is "", else those after it.
	Page(ctx context.Context, q database.Querier, after string, limit int) ([]Here, error)
	// Heal makes the keys pending again as new versions (tombstones for
	// keys gone here), in tx, and wakes the daemons.
	Heal(ctx context.Context, tx pgx.Tx, ids []string) (int64, error)
	// AnyPending reports whether the source has rows still to export.
	AnyPending(ctx context.Context, q database.Querier) (bool, error)
	// PendingOf returns those of ids that are pending now.
	PendingOf(ctx context.Context, q database.Querier, ids []string) ([]string, error)
}

// Reader asks a destination what it holds: a format's reader, which the
// formats registry builds (formats.Reader).
type Reader interface {
	// Lookup returns what the destination holds for ids; an id left out of
	// the map is absent there.
	Lookup(ctx context.Context, ids []string) (map[string]There, error)
}

// ItemReader is a Reader given the keys as items, as they would be sent
// (Version: the one last accepted, 0 when not known): a verify block's
// request program reads them, and its compare program compares them with
// what is held. Run asks it in place of Lookup.
type ItemReader interface {
	LookupItems(ctx context.Context, items []thirdparty.Item) (map[string]There, error)
}

// Range bounds a run by key, inclusive; the zero Range is every key.
type Range struct {
	FromKey, ToKey string
}

// Defaults.
const (
	// LookupSizeDefault is how many ids one lookup asks for.
	LookupSizeDefault = 500
	// ExamplesDefault is how many examples a kind keeps.
	ExamplesDefault = 20
)

// Config is a run's settings.
type Config struct {
	// Range is the keys to check, kept with the progress so a run of
	// another range starts afresh. Defaults to every key.
	Range Range
	// LookupSize is the most ids one lookup asks for, and the size of a
	// page of keys. Defaults to LookupSizeDefault.
	LookupSize int
	// Sample is the share of keys checked, in (0, 1]; each key is drawn
	// at random. Defaults to 1 (every key).
	Sample float64
	// Heal makes drifted keys pending again. Defaults to false.
	Heal bool
	// Pace waits before each lookup; nil does not wait. See NewPace.
	Pace *Pace
	// Rand draws the sample. Defaults to a random source.
	Rand *rand.Rand
	// Logger logs progress. Defaults to a logger that discards.
	Logger *slog.Logger
	// By says who started the run, as the last run records it (ByCommand,
	// ByBackground, ByConsole). Defaults to ByCommand.
	By string
}

// lookupSize is n, or LookupSizeDefault when 0: the one place the
// default is applied, for a run's Config and a BackgroundConfig.
func lookupSize(n int) int { return cmp.Or(n, LookupSizeDefault) }

func (c *Config) withDefaults() Config {
	out := *c
	out.LookupSize = lookupSize(out.LookupSize)
	out.Sample = cmp.Or(out.Sample, 1)
	out.By = cmp.Or(out.By, ByCommand)
	if out.Rand == nil {
		out.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

func (c *Config) validate() error {
	if c.LookupSize < 0 {
		return fmt.Errorf("verify: LookupSize %d: must be positive", c.LookupSize)
	}
	if c.Sample < 0 || c.Sample > 1 {
		return fmt.Errorf("verify: Sample %g: must be above 0 and at most 1", c.Sample)
	}
	return nil
}

// Example is one key of a kind, with the two sides.
type Example struct {
	// Tenant is the key's tenant in a run of every tenant (RunTenants).
	Tenant tenant.Tenant   `json:"tenant,omitempty"`
	ID     string          `json:"id"`
	Kind   Kind            `json:"kind"`
	Here   json.RawMessage `json:"here"`
	There  json.RawMessage `json:"there"`
}

// Result is a run's outcome, in the JSON shape of `syncer verify --json`.
type Result struct {
	Source string `json:"source"`
	// Tenant is the tenant verified (--tenant); absent for a whole source.
	Tenant tenant.Tenant `json:"tenant,omitempty"`
	KindCounts
	Examples []Example `json:"examples"`
	// Tenants are each tenant's counts when the run verified every tenant
	// of a source whose destination has a tenants block (RunTenants); the
	// counts above are their sums. Absent otherwise.
	Tenants []TenantCounts `json:"tenants,omitempty"`
	// Healed counts keys made pending again by --heal; not in the JSON of
	// section 11, printed by the text output.
	Healed int64 `json:"-"`
	// Resumed is set when the run went on from an interrupted one.
	Resumed bool `json:"-"`
}

// KindCounts are keys counted by kind: a run's (Result), a tenant's in a
// run of every tenant (TenantCounts), the last finished run's (Counts).
type KindCounts struct {
	Checked int64 `json:"checked"`
	OK      int64 `json:"ok"`
	Missing int64 `json:"missing"`
	Stale   int64 `json:"stale"`
	Zombie  int64 `json:"zombie"`
	Failed  int64 `json:"failed"`
	Unknown int64 `json:"unknown"`
	Pending int64 `json:"pending"`
}

// Drifted is how many keys drifted.
func (c *KindCounts) Drifted() int64 { return c.Missing + c.Stale + c.Zombie }

// Add adds o's counts to c's.
func (c *KindCounts) Add(o KindCounts) {
	c.Checked += o.Checked
	c.OK += o.OK
	c.Missing += o.Missing
	c.Stale += o.Stale
	c.Zombie += o.Zombie
	c.Failed += o.Failed
	c.Unknown += o.Unknown
	c.Pending += o.Pending
}

func (r *Result) add(k Kind, n int64) {
	r.Checked += n
	switch k {
	case OK:
		r.OK += n
	case Missing:
		r.Missing += n
	case Stale:
		r.Stale += n
	case Zombie:
		r.Zombie += n
	case Failed:
		r.Failed += n
	case Unknown:
		r.Unknown += n
	case Pending:
		r.Pending += n
	}
}

func (r *Result) example(ex Example) {
	n := 0
	for _, e := range r.Examples {
		if e.Kind == ex.Kind {
			n++
		}
	}
	if n < ExamplesDefault {
		r.Examples = append(r.Examples, ex)
	}
}

// ErrInterrupted is returned, wrapped, when ctx ends a run: its progress
// is saved and the next run of the same range resumes it.
var ErrInterrupted = errors.New("verify interrupted; run it again to resume")

// Run checks the source's keys of cfg.Range against what rd says the
// destination holds, and heals with cfg.Heal. db is the pool: each page is
// read, and its progress saved, in short statements of its own. The run's
// start and end are recorded as the source's last verify (LastRuns).
func Run(ctx context.Context, db database.DB, src Source, rd Reader, cfg *Config) (res *Result, err error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	// A read API that takes fewer ids a request bounds the pages too.
	if m, ok := rd.(interface{ MaxIDs() int }); ok && m.MaxIDs() > 0 {
		c.LookupSize = min(c.LookupSize, m.MaxIDs())
	}
	key := RunKey(src)
	if err := started(ctx, db, key, c.By); err != nil {
		return nil, err
	}
	defer func() { recordEnd(ctx, db, key, res, &err) }()
	return run(ctx, db, src, rd, &c)
}

// recordEnd records the end of the run under key, as its error *errp
// says (finished, interrupted or failed), even when ctx ended the run:
// status says it stopped. A failure to record it becomes *errp when the
// run had none.
func recordEnd(ctx context.Context, db database.Querier, key string, res *Result, errp *error) {
	err := *errp
	state := StateFinished
	switch {
	case errors.Is(err, ErrInterrupted):
		state = StateInterrupted
	case err != nil:
		state = StateFailed
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := ended(wctx, db, key, state, res, err); rerr != nil && err == nil {
		*errp = rerr
	}
}

func run(ctx context.Context, db database.DB, src Source, rd Reader, cp *Config) (*Result, error) {
	c := *cp
	key := RunKey(src)
	p, err := loadProgress(ctx, db, key, c.Range, c.Sample)
	if err != nil {
		return nil, err
	}
	res := &p.Result
	res.Source = src.Name()
	if t, ok := src.(tenanted); ok {
		res.Tenant = t.Tenant()
	}
	if res.Examples == nil {
		res.Examples = []Example{}
	}
	for !p.Done {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
		}
		keys, after, done, err := nextPage(ctx, db, src, p.After, c.LookupSize)
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			return res, fmt.Errorf("verify: read keys of %s: %w", src.Name(), err)
		}
		next := *res
		next.Examples = append([]Example(nil), res.Examples...)
		drifted, err := checkPage(ctx, db, src, rd, &c, keys, &next)
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			return res, err
		}
		err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			next.Healed = res.Healed
			if c.Heal && len(drifted) > 0 {
				n, err := src.Heal(ctx, tx, drifted)
				if err != nil {
					return err
				}
				next.Healed += n
			}
			if done {
				return deleteProgress(ctx, tx, key)
			}
			return saveProgress(ctx, tx, key, c.Range, c.Sample, after, &next)
		})
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("%w: %w", ErrInterrupted, err)
			}
			return res, fmt.Errorf("verify: save progress of %s: %w", src.Name(), err)
		}
		*res = next
		p.After, p.Done = after, done
		c.Logger.DebugContext(ctx, "verify: page checked", slog.String("source", src.Name()),
			slog.Int("keys", len(keys)), slog.Int64("checked", res.Checked))
	}
	return res, nil
}

// tenanted is a Source of one tenant's rows (NewConfiguredTenant).
type tenanted interface{ Tenant() tenant.Tenant }

// RunKey is the name src's runs are kept under in syncer_verify_runs and
// syncer_verify_last: the source's, or tenant.RunKey for one tenant's
// rows, so every tenant has its cursor and last run.
func RunKey(src Source) string {
	if t, ok := src.(tenanted); ok {
		return tenant.RunKey(src.Name(), t.Tenant())
	}
	return src.Name()
}

// checkPage sorts the sampled keys of one page into res and returns the
// ids that drifted.
func checkPage(ctx context.Context, db database.Querier, src Source, rd Reader, c *Config, keys []Here, res *Result) ([]string, error) {
	var ask []string
	var asked []*Here
	for i := range keys {
		h := &keys[i]
		if c.Sample < 1 && c.Rand.Float64() >= c.Sample {
			continue
		}
		if h.Pending {
			res.add(Pending, 1)
			continue
		}
		ask = append(ask, h.ID)
		asked = append(asked, h)
	}
	if len(ask) == 0 {
		return nil, nil
	}
	if c.Pace != nil {
		if err := c.Pace.Wait(ctx, db, src); err != nil {
			return nil, err
		}
	}
	var there map[string]There
	var err error
	if ir, ok := rd.(ItemReader); ok {
		there, err = ir.LookupItems(ctx, itemsOf(asked))
	} else {
		there, err = rd.Lookup(ctx, ask)
	}
	if err != nil {
		return nil, fmt.Errorf("verify: look up %d ids of %s: %w", len(ask), src.Name(), err)
	}
	kinds := make([]Kind, len(asked))
	var suspects []string
	for i, h := range asked {
		t, ok := there[h.ID]
		kinds[i] = classify(h, t, ok)
		if kinds[i].drift() {
			suspects = append(suspects, h.ID)
		}
	}
	// A write between the page's read and the answer makes a key pending,
	// not drifted: the export is about to send it.
	var changed []string
	if len(suspects) > 0 {
		if changed, err = src.PendingOf(ctx, db, suspects); err != nil {
			return nil, fmt.Errorf("verify: pending keys of %s: %w", src.Name(), err)
		}
	}
	var drifted []string
	for i, h := range asked {
		k := kinds[i]
		if k.drift() && slices.Contains(changed, h.ID) {
			k = Pending
		}
		res.add(k, 1)
		if k != OK && k != Pending {
			t, ok := there[h.ID]
			res.example(Example{ID: h.ID, Kind: k, Here: side(h.Payload, h.Gone), There: scrubbed(rd, thereSide(t, ok))})
		}
		if k.drift() {
			drifted = append(drifted, h.ID)
		}
	}
	return drifted, nil
}

// itemsOf are keys as the items a verify block's programs read.
func itemsOf(keys []*Here) []thirdparty.Item {
	items := make([]thirdparty.Item, len(keys))
	for i, h := range keys {
		items[i] = thirdparty.Item{ID: h.ID, Version: h.Accepted, Payload: h.Payload, Deleted: h.Gone}
	}
	return items
}

var (
	null    = json.RawMessage(`null`)
	deleted = json.RawMessage(`{"deleted":true}`)
)

func side(payload json.RawMessage, gone bool) json.RawMessage {
	if gone || payload == nil {
		return deleted
	}
	return payload
}

func thereSide(t There, ok bool) json.RawMessage {
	switch {
	case !ok:
		return null
	case t.Unknown:
		return null
	case t.Deleted:
		return deleted
	}
	return side(t.Payload, false)
}
