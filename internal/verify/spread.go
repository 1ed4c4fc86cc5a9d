package verify

import "time"

// spread paces a periodic run's lookups over its period (Pace.Spread).
// Each lookup waits the time left before end over the lookups left, so a
// run whose lookups went slower than expected (the destination's limit,
// an open breaker) catches up, and the last one expected goes at end.
//
// An estimate can be low: rows added while the run goes on, tombstones
// read back after the rows, a read API taking fewer ids a request. Past
// it the run expects as many lookups again as it made, by halfway from
// end to bound: its lookups quicken a step at a time (each step's about a
// quarter of the step's before), rather than going at the destination's
// pace at once, and however many there are they end before bound, the
// period (as long as the destination's rate allows them).
type spread struct {
	// lookups is how many the run expects to make; done how many went.
	lookups, done int64
	// end is when the last lookup expected goes; bound when the run
	// ends at the latest.
	end, bound time.Time
}

func newSpread(now time.Time, lookups int64, aim, bound time.Duration) *spread {
	return &spread{lookups: max(lookups, 1), end: now.Add(aim), bound: now.Add(max(aim, bound))}
}

// next is when the next lookup may go, the last having gone at last; the
// zero time for the first, which goes at once.
func (s *spread) next(last time.Time) time.Time {
	if s.done == 0 {
		return time.Time{}
	}
	if s.done >= s.lookups {
		s.lookups = 2 * s.done
		s.end = s.end.Add(s.bound.Sub(s.end) / 2)
	}
	return last.Add(s.end.Sub(last) / time.Duration(s.lookups-s.done))
}
