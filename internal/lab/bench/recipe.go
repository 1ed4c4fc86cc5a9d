package bench

// This file is the BASELINE, not a product path: the common "sync a table
// with River" recipe from blog posts, built here only so syncer can be
// measured against it in the same run. Nothing in syncer uses it.
//
// The recipe: the application enqueues one River job per inserted row, in
// the same transaction as the insert (client.InsertTx). Each job takes a
// blocking pg_advisory_lock on one global key, so pushes never overlap,
// selects up to a batch of unsynced rows, pushes them, marks them synced and
// unlocks. River runs on its defaults (fetch cooldown and poll interval)
// with four workers.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/syncer-dev/syncer/internal/locks"
	"github.com/syncer-dev/syncer/internal/resources"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// RecipeArgs is the recipe's job: "something was inserted, sync".
type RecipeArgs struct{}

// Kind is River's name for the recipe's job.
func (RecipeArgs) Kind() string { return "bench_recipe_sync" }

// recipeWorkers is the recipe's River MaxWorkers.
const recipeWorkers = 4

type recipeWorker struct {
	river.WorkerDefaults[RecipeArgs]
	pool    *pgxpool.Pool
	client  *thirdparty.Client
	batch   int
	lockKey int64
}

// Work is the recipe's job body.
func (w *recipeWorker) Work(ctx context.Context, _ *river.Job[RecipeArgs]) error {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, w.lockKey); err != nil {
		return fmt.Errorf("recipe: lock: %w", err)
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, w.lockKey)
	}()
	return exportOnce(ctx, conn, w.client, w.batch, "recipe")
}

// exportOnce is one look of a plain exporter, the recipe's job body and
// the plain poller's tick alike: it selects up to batch unsynced rows of
// resources on db, pushes them under a key of installation's and marks the
// accepted ones synced.
func exportOnce(ctx context.Context, db resources.DB, client *thirdparty.Client, batch int, installation string) error {
	rows, err := db.Query(ctx, `SELECT id::text, version, payload FROM resources
		WHERE synced_at IS NULL AND failed_at IS NULL ORDER BY id LIMIT $1`, batch)
	if err != nil {
		return fmt.Errorf("plain exporter: select: %w", err)
	}
	items, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (thirdparty.Item, error) {
		var it thirdparty.Item
		err := row.Scan(&it.ID, &it.Version, &it.Payload)
		return it, err
	})
	if err != nil {
		return fmt.Errorf("plain exporter: select: %w", err)
	}
	if len(items) == 0 {
		return nil
	}
	body := thirdparty.AppendBatch(nil, items)
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	res, err := client.PushBody(ctx, thirdparty.BatchKey(installation, "", body), body, ids)
	if err != nil {
		return fmt.Errorf("plain exporter: push: %w", err)
	}
	rejected := map[string]bool{}
	for _, rj := range res.Rejected {
		rejected[rj.ID] = true
	}
	var acc resources.Versions
	for _, it := range items {
		if !rejected[it.ID] {
			id, err := strconv.ParseInt(it.ID, 10, 64)
			if err != nil {
				return fmt.Errorf("plain exporter: id %q: %w", it.ID, err)
			}
			acc.Add(id, it.Version)
		}
	}
	if _, err := resources.MarkSynced(ctx, db, acc); err != nil {
		return fmt.Errorf("plain exporter: mark: %w", err)
	}
	return nil
}

// recipe is a running recipe: its River client and the pool it works on.
type recipe struct {
	client *river.Client[pgx.Tx]
	pool   *pgxpool.Pool
	tp     *thirdparty.Client
}

// newRecipe builds the recipe's River client on s, pushing to f. It does not
// start it.
func (r *runner) newRecipe(ctx context.Context, s *scratch, f *fake) (*recipe, error) {
	// Workers hold a connection while they wait for the lock, so the pool
	// has room for them and for River's own queries.
	pool, err := r.pool(ctx, s.name, recipeWorkers+6)
	if err != nil {
		return nil, err
	}
	tp, err := thirdparty.New(&thirdparty.Config{URL: f.url})
	if err != nil {
		pool.Close()
		return nil, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &recipeWorker{
		pool: pool, client: tp, batch: r.sizes.BatchSize,
		lockKey: locks.Key("bench", "recipe:"+s.name),
	})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Schema:  s.name,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: recipeWorkers}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tp.Close()
		pool.Close()
		return nil, fmt.Errorf("recipe: river client: %w", err)
	}
	return &recipe{client: client, pool: pool, tp: tp}, nil
}

// insert is the recipe's writer: the row and its job in one transaction.
func (rc *recipe) insert(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ($1) RETURNING id`, payloadFor(i)).Scan(&id); err != nil {
			return err
		}
		_, err := rc.client.InsertTx(ctx, tx, RecipeArgs{}, nil)
		return err
	})
	return id, err
}

func (rc *recipe) close(ctx context.Context) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := rc.client.Stop(sctx); err != nil {
		_ = rc.client.StopAndCancel(sctx)
	}
	rc.tp.Close()
	rc.pool.Close()
}

// recipeDrain pre-inserts n rows, enqueues jobs jobs, starts the recipe and
// measures until the table is drained.
func (r *runner) recipeDrain(ctx context.Context, n, jobCount int) (float64, time.Duration, error) {
	s, err := r.newScratch(ctx, "recipe-drain", true)
	if err != nil {
		return 0, 0, err
	}
	defer s.drop(ctx)
	r.progressf("   recipe drain: inserting %s rows and %s jobs", count(float64(n)), count(float64(jobCount)))
	if err := s.preload(ctx, n); err != nil {
		return 0, 0, err
	}
	f, err := startFake(n)
	if err != nil {
		return 0, 0, err
	}
	defer f.close()
	rc, err := r.newRecipe(ctx, s, f)
	if err != nil {
		return 0, 0, err
	}
	defer rc.close(ctx)
	params := make([]river.InsertManyParams, jobCount)
	for i := range params {
		params[i] = river.InsertManyParams{Args: RecipeArgs{}}
	}
	if _, err := rc.client.InsertMany(ctx, params); err != nil {
		return 0, 0, fmt.Errorf("recipe: enqueue: %w", err)
	}
	r.progressf("   recipe drain: draining")
	start := time.Now()
	if err := rc.client.Start(ctx); err != nil {
		return 0, 0, fmt.Errorf("recipe: start: %w", err)
	}
	end, err := s.waitDrained(ctx, f.Server, int64(n), drainLimit(n))
	if err != nil {
		return 0, 0, err
	}
	took := end.Sub(start)
	return float64(n) / took.Seconds(), took, nil
}

// recipeBurst inserts n rows, each with its job, into the running recipe's
// table and measures until they are exported.
func (r *runner) recipeBurst(ctx context.Context, n int) (burstResult, error) {
	var res burstResult
	s, err := r.newScratch(ctx, "recipe-burst", true)
	if err != nil {
		return res, err
	}
	defer s.drop(ctx)
	f, err := startFake(n)
	if err != nil {
		return res, err
	}
	defer f.close()
	rc, err := r.newRecipe(ctx, s, f)
	if err != nil {
		return res, err
	}
	defer rc.close(ctx)
	if err := rc.client.Start(ctx); err != nil {
		return res, fmt.Errorf("recipe: start: %w", err)
	}
	// Let the client settle (leadership, first fetch) before the burst.
	time.Sleep(time.Second)
	r.progressf("   recipe burst: %s inserts with jobs from %d connections", count(float64(n)), r.sizes.Writers)
	if res, err = r.timeBurst(ctx, s, f, n, rc.insert); err != nil {
		return res, err
	}
	res.jobs = int64(n)
	return res, nil
}

// plainBurst is the writers' rate with no syncer and no recipe.
func (r *runner) plainBurst(ctx context.Context, n int) (writeResult, error) {
	s, err := r.newScratch(ctx, "burst-plain", true)
	if err != nil {
		return writeResult{}, err
	}
	defer s.drop(ctx)
	return write(ctx, s.pool, r.sizes.Writers, int64(n), 0, plainInsert, false)
}

func (r *runner) recipe(ctx context.Context) ([]Row, error) {
	n, jobCount, burst := r.sizes.RecipeDrainRows, r.sizes.RecipeDrainJobs, r.sizes.BurstInserts
	recipeRate, recipeTook, err := r.recipeDrain(ctx, n, jobCount)
	if err != nil {
		return nil, err
	}
	syncerRate := r.syncerDrainRate
	if syncerRate == 0 || r.sizes.DrainRows != n {
		res, err := r.syncerDrain(ctx, "recipe-syncer-drain", n, "")
		if err != nil {
			return nil, err
		}
		syncerRate = res.rate
	}
	ratio := syncerRate / recipeRate
	rows := []Row{{
		Scenario: "recipe: drain",
		Measured: fmt.Sprintf("%s rows/s", count(syncerRate)),
		Baseline: fmt.Sprintf("recipe %s rows/s (%s rows, %s jobs, %.1f s)", count(recipeRate), count(float64(n)), count(float64(jobCount)), recipeTook.Seconds()),
		Figure:   fmt.Sprintf("%.2fx", ratio),
		Target:   "> 1x (syncer wins)",
		Pass:     ratio > 1,
		Values:   map[string]float64{"rows_per_s": syncerRate, "recipe_rows_per_s": recipeRate, "ratio": ratio},
	}}

	r.progressf("   burst: plain inserts")
	plain, err := r.plainBurst(ctx, burst)
	if err != nil {
		return rows, err
	}
	sb, err := r.syncerBurst(ctx, "burst-syncer", burst)
	if err != nil {
		return rows, err
	}
	rb, err := r.recipeBurst(ctx, burst)
	if err != nil {
		return rows, err
	}
	speedup := rb.exported.Seconds() / sb.exported.Seconds()
	writers := sb.writers.rate() / rb.writers.rate()
	rows = append(rows, Row{
		Scenario: "recipe: burst export",
		Measured: fmt.Sprintf("%s rows exported in %s (%d jobs)", count(float64(burst)), ms(sb.exported), sb.jobs),
		Baseline: fmt.Sprintf("recipe %s (%s jobs, %.2f s lock wait)", ms(rb.exported), count(float64(rb.jobs)), rb.lockWaitS),
		Figure:   fmt.Sprintf("%.2fx faster", speedup),
		Target:   "> 1x (syncer wins)",
		Pass:     speedup > 1,
		Values: map[string]float64{"inserts": float64(burst), "export_s": sb.exported.Seconds(), "recipe_export_s": rb.exported.Seconds(),
			"ratio": speedup, "jobs": float64(sb.jobs), "recipe_jobs": float64(rb.jobs), "lock_wait_s": sb.lockWaitS, "recipe_lock_wait_s": rb.lockWaitS},
	}, Row{
		Scenario: "recipe: burst writers",
		Measured: fmt.Sprintf("%s inserts/s (%.2fx plain)", count(sb.writers.rate()), sb.writers.rate()/plain.rate()),
		Baseline: fmt.Sprintf("recipe %s/s (%.2fx plain %s/s)", count(rb.writers.rate()), rb.writers.rate()/plain.rate(), count(plain.rate())),
		Figure:   fmt.Sprintf("%.2fx", writers),
		Target:   "> 1x (syncer wins)",
		Pass:     writers > 1,
		Values: map[string]float64{"inserts_per_s": sb.writers.rate(), "recipe_inserts_per_s": rb.writers.rate(),
			"plain_inserts_per_s": plain.rate(), "ratio": writers},
	})
	if i := r.jobLockWaitRow - 1; i >= 0 && i < len(r.report.Rows) {
		r.report.Rows[i].Baseline = fmt.Sprintf("recipe %.2f s (%s-insert burst)", rb.lockWaitS, count(float64(burst)))
	}
	return rows, nil
}
