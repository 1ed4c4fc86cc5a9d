package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// writeResult is what a set of writers did.
type writeResult struct {
	rows    int64
	took    time.Duration
	commits []time.Time // by id - firstID, when wanted
	ids     []int64
	rtt     []time.Duration
}

func (w writeResult) rate() float64 { return float64(w.rows) / max(w.took.Seconds(), 1e-9) }

// insertFunc inserts one row in its own transaction and returns its id.
type insertFunc func(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error)

func plainInsert(ctx context.Context, conn *pgxpool.Conn, i int64) (int64, error) {
	var id int64
	err := conn.QueryRow(ctx, `INSERT INTO resources (payload) VALUES ($1) RETURNING id`, payloadFor(i)).Scan(&id)
	return id, err
}

// write runs writers concurrent writers, each on its own connection, each
// inserting single-row transactions with insert. It stops after n rows in
// all (n > 0) or after d (n == 0). When track is set it records, per row,
// the id and the time its commit returned.
func write(ctx context.Context, pool *pgxpool.Pool, writers int, n int64, d time.Duration, insert insertFunc, track bool) (writeResult, error) {
	var next, done atomic.Int64
	var mu sync.Mutex
	var res writeResult
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stop atomic.Bool
	if n == 0 {
		time.AfterFunc(d, func() { stop.Store(true) })
	}
	errc := make(chan error, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				errc <- err
				return
			}
			defer conn.Release()
			var ids []int64
			var at []time.Time
			var rtt []time.Duration
			for !stop.Load() {
				i := next.Add(1)
				if n > 0 && i > n {
					break
				}
				t0 := time.Now()
				id, err := insert(ctx, conn, i)
				if err != nil {
					errc <- err
					cancel()
					return
				}
				done.Add(1)
				if track {
					now := time.Now()
					ids, at, rtt = append(ids, id), append(at, now), append(rtt, now.Sub(t0))
				}
			}
			mu.Lock()
			res.ids = append(res.ids, ids...)
			res.commits = append(res.commits, at...)
			res.rtt = append(res.rtt, rtt...)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return res, fmt.Errorf("bench: writer: %w", err)
	}
	res.rows = done.Load()
	return res, nil
}

// paced inserts total rows with insert, one a tick of interval, from
// writers connections, recording for each row its id and when its commit
// returned. The connections are open before the first tick: opening
// dozens of them (TLS handshakes on both ends) is not part of the rate.
func paced(ctx context.Context, pool *pgxpool.Pool, writers, total int, interval time.Duration, insert insertFunc) (writeResult, error) {
	conns := make([]*pgxpool.Conn, 0, writers)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range writers {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return writeResult{}, fmt.Errorf("bench: writer: %w", err)
		}
		conns = append(conns, conn)
	}
	ticks := make(chan int64, total)
	go func() {
		defer close(ticks)
		// Each row has its time from the start, not from the row before:
		// a ticker drops ticks at short intervals (4,000 a second), and a
		// late row is followed by the next ones at once, so the offered
		// rate holds.
		t0 := time.Now()
		for i := range total {
			if wait := time.Until(t0.Add(time.Duration(i) * interval)); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			ticks <- int64(i + 1)
		}
	}()
	var mu sync.Mutex
	var res writeResult
	errc := make(chan error, writers)
	start := time.Now()
	var wg sync.WaitGroup
	for _, conn := range conns {
		wg.Go(func() {
			for i := range ticks {
				t0 := time.Now()
				id, err := insert(ctx, conn, i)
				if err != nil {
					errc <- err
					return
				}
				now := time.Now()
				mu.Lock()
				res.ids, res.commits, res.rtt = append(res.ids, id), append(res.commits, now), append(res.rtt, now.Sub(t0))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	res.rows = int64(len(res.ids))
	close(errc)
	if err := <-errc; err != nil {
		return res, fmt.Errorf("bench: writer: %w", err)
	}
	return res, nil
}
