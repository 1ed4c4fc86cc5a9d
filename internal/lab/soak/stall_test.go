package soak

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stall check: changes pending and none settled for StallTarget is one
// violation; progress, a hold of the source, or a key hold beginning or
// ending starts the clock again, so a fault that legitimately holds a
// source never counts, and the time after it does.
func TestStallLook(t *testing.T) {
	t.Parallel()
	s := time.Second
	set := func(seqs ...int64) map[int64]bool {
		m := map[int64]bool{}
		for _, q := range seqs {
			m[q] = true
		}
		return m
	}
	p := &sourceProgress{}
	// Nothing pending, then changes: the clock starts at the first look
	// that sees them.
	_, d := p.look(0, set(), false, false, 0)
	require.Zero(t, d)
	_, d = p.look(2*s, set(1, 2), false, false, 0)
	require.Zero(t, d)
	require.Equal(t, 2*s, p.since)
	require.False(t, p.settled(set(1, 2, 3)), "a change written is no progress")
	require.True(t, p.settled(set(2, 3)), "a change gone is")
	_, d = p.look(30*s, set(1, 2, 3), false, false, 0)
	require.Zero(t, d, "28 s is within the target")
	_, d = p.look(34*s, set(1, 2, 3), false, false, 0)
	require.Equal(t, 32*s, d, "past the target: a stall")
	_, d = p.look(36*s, set(1, 2, 3), false, false, 0)
	require.Zero(t, d, "a stall is reported once")
	ended, d := p.look(38*s, set(2, 3), true, false, 0)
	require.Zero(t, d)
	require.Equal(t, 36*s, ended, "progress ends the stretch, for the report")

	// A hold of the whole source: no stall while it lasts, and the clock
	// starts at the first look after it.
	p = &sourceProgress{}
	p.look(0, set(1), false, false, 0)
	for at := 2 * s; at <= 60*s; at += 2 * s {
		_, d = p.look(at, set(1), false, true, 0)
		require.Zero(t, d, "held at %s", at)
	}
	_, d = p.look(62*s, set(1), false, false, 0)
	require.Zero(t, d)
	_, d = p.look(90*s, set(1), false, false, 0)
	require.Zero(t, d, "28 s after the hold")
	_, d = p.look(94*s, set(1), false, false, 0)
	require.Equal(t, 32*s, d, "32 s after the hold")

	// A key hold beginning or ending starts the clock again: the held
	// keys leave or join the pending set then.
	p = &sourceProgress{}
	p.look(0, set(1, 2), false, false, 0)
	_, d = p.look(20*s, set(2), false, false, 1)
	require.Zero(t, d)
	_, d = p.look(48*s, set(2), false, false, 1)
	require.Zero(t, d, "28 s after the key hold began")
	_, d = p.look(52*s, set(1, 2), false, false, 0)
	require.Zero(t, d, "the key hold ended")
	_, d = p.look(84*s, set(1, 2), false, false, 0)
	require.Equal(t, 32*s, d)
}

// A hold covers its source (or every source) over its stretch; a key
// hold names keys, and holds only those.
func TestHoldsOf(t *testing.T) {
	t.Parallel()
	r := &run{}
	s := time.Second
	r.hold(hold{from: 10 * s, to: 20 * s})
	r.hold(hold{from: 30 * s, to: 40 * s, source: sourceHub})
	r.hold(hold{from: 50 * s, to: 60 * s, source: sourceSearch, keys: func(k string) bool { return k == "acct-1" }})
	whole, keys := r.holdsOf(resourcesSource, 15*s)
	require.True(t, whole)
	require.Empty(t, keys)
	whole, _ = r.holdsOf(sourceOrders, 35*s)
	require.False(t, whole, "hub's hold holds only orders-hub")
	whole, _ = r.holdsOf(sourceHub, 35*s)
	require.True(t, whole)
	whole, keys = r.holdsOf(sourceSearch, 55*s)
	require.False(t, whole)
	require.Len(t, keys, 1)
	require.True(t, keys[0]("acct-1"))
	require.False(t, keys[0]("acct-2"))
	whole, keys = r.holdsOf(sourceSearch, 61*s)
	require.False(t, whole)
	require.Empty(t, keys)
}

// With every daemon frozen or down no daemon can take anything over: the
// stall check holds every source then (seed 911096515: one daemon in its
// shutdown, the other two frozen).
func TestAnyDaemonRuns(t *testing.T) {
	t.Parallel()
	frozen := &daemon{cmd: &exec.Cmd{}, stopped: true}
	down := &daemon{cmd: &exec.Cmd{}, down: true}
	live := &daemon{cmd: &exec.Cmd{}}
	require.False(t, (&run{daemons: []*daemon{frozen, down}}).anyDaemonRuns())
	require.True(t, (&run{daemons: []*daemon{frozen, down, live}}).anyDaemonRuns())
}
