package procs

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// A light load goes to one P only after LowerAfter under Lower; a busy
// interval on one P gives every P back at once; a load that uses between
// Lower and Raise stays where it is.
func TestStep(t *testing.T) {
	t0 := time.Unix(0, 0)
	g := New(Config{Max: 4, CPU: func() (time.Duration, bool) { return 0, true }})
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

	steps := []struct {
		ms    int
		cores float64
		want  int
	}{
		{0, 0.2, 4},    // quiet starts
		{500, 0.3, 4},  // still quiet, not long enough
		{1500, 0.6, 4}, // over Lower: the quiet spell starts again
		{1600, 0.1, 4},
		{2500, 0.1, 4}, // 0.9 s quiet
		{2600, 0.1, 1}, // 1.0 s: one P
		{3700, 0.6, 1}, // between Lower and Raise on one P: stays
		{3800, 0.7, 4}, // Raise: every P at once
		{3900, 0.6, 4}, // between the two on Max: stays
		{4000, 0.49, 4},
		{5000, 0.49, 1},
	}
	for _, s := range steps {
		if got := g.step(s.cores, at(s.ms)); got != s.want {
			t.Fatalf("at %d ms, %.2f cores: %d Ps, want %d", s.ms, s.cores, got, s.want)
		}
	}
}

// On one P and idle the readings space out, doubling up to IdleInterval;
// the first reading that sees work, or every P, brings back Interval.
func TestNextSpacesOutWhileIdle(t *testing.T) {
	g := New(Config{Max: 2, Interval: 20 * time.Millisecond, IdleInterval: 100 * time.Millisecond,
		CPU: func() (time.Duration, bool) { return 0, true }})
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	if got := g.next(0, ms(20)); got != ms(20) {
		t.Fatalf("idle on every P: wait %v, want the interval", got)
	}
	g.procs = 1
	steps := []struct {
		cores      float64
		wait, want time.Duration
	}{
		{0.001, ms(20), ms(40)},
		{0.001, ms(40), ms(80)},
		{0.001, ms(80), ms(100)}, // capped
		{0.001, ms(100), ms(100)},
		{0.05, ms(100), ms(20)}, // work: back to the interval at once
		{0.3, ms(20), ms(20)},
	}
	for _, s := range steps {
		if got := g.next(s.cores, s.wait); got != s.want {
			t.Fatalf("%.3f cores after %v: wait %v, want %v", s.cores, s.wait, got, s.want)
		}
	}
}

// Run starts with Max, reads the process's CPU time every interval, sets
// what step decides and gives back Max when its context ends.
func TestRunSetsAndRestores(t *testing.T) {
	var (
		mu   sync.Mutex
		now  = time.Unix(0, 0)
		used time.Duration
		sets []int
	)
	// Each read advances the clock by 100 ms; the first 30 reads use 10 ms
	// each (0.1 cores), the next ones 90 ms (0.9 cores).
	reads := 0
	cpu := func() (time.Duration, bool) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		now = now.Add(100 * time.Millisecond)
		if reads <= 30 {
			used += 10 * time.Millisecond
		} else {
			used += 90 * time.Millisecond
		}
		return used, true
	}
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	done := make(chan struct{})
	g := New(Config{Max: 2, Interval: time.Millisecond, CPU: cpu, Now: clock, Set: func(n int) {
		mu.Lock()
		defer mu.Unlock()
		sets = append(sets, n)
		if n == 2 && len(sets) == 2 {
			close(done)
		}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		g.Run(ctx)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the Ps were not lowered and raised again: %v", sets)
	}
	cancel()
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 2, 2}; !slices.Equal(sets, want) {
		t.Fatalf("GOMAXPROCS set to %v, want %v (lowered, raised, restored)", sets, want)
	}
}

// With one P to give, or no reading of the CPU time, Run leaves the Ps
// alone.
func TestRunDoesNothingWithoutRoom(t *testing.T) {
	for _, cfg := range []Config{
		{Max: 1, CPU: func() (time.Duration, bool) { return 0, true }},
		{Max: 4, CPU: func() (time.Duration, bool) { return 0, false }},
	} {
		set := false
		cfg.Set = func(int) { set = true }
		New(cfg).Run(context.Background())
		if set {
			t.Fatalf("Max %d: GOMAXPROCS was set", cfg.Max)
		}
	}
}

// The process's own CPU time is read and grows with work.
func TestProcessCPU(t *testing.T) {
	a, ok := processCPU()
	if !ok {
		t.Fatal("no CPU time read")
	}
	x := 0
	for i := 0; i < 50_000_000; i++ {
		x += i ^ (x >> 3)
	}
	b, _ := processCPU()
	if b <= a {
		t.Fatalf("CPU time did not grow: %v then %v (%d)", a, b, x)
	}
}
