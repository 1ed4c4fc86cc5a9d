package bench

import (
	"context"
	"sync/atomic"
	"time"
)

// lockWaitSampler counts, every interval, the schema's sessions waiting on
// an advisory lock; samples x interval estimates the time spent waiting.
type lockWaitSampler struct {
	samples  atomic.Int64
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
}

func (r *runner) sampleLockWaits(ctx context.Context, schema string) (*lockWaitSampler, error) {
	conn, err := r.connect(ctx, "")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &lockWaitSampler{interval: 10 * time.Millisecond, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer conn.Close(context.WithoutCancel(ctx))
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			var n int64
			err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event = 'advisory'`, schema).Scan(&n)
			if err == nil {
				s.samples.Add(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s, nil
}

// stop ends sampling and returns the estimated seconds spent waiting.
func (s *lockWaitSampler) stop() float64 {
	s.cancel()
	<-s.done
	return float64(s.samples.Load()) * s.interval.Seconds()
}
