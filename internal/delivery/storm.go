package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// A rejection storm is the destination's fault, not the rows': a receiver
// whose signing secret changed answers 400 "No matching signature found"
// to every request, a batch API wraps its 403 in a 400 answer. Failing
// every row it rejects would fail every row written meanwhile, for good.
//
// The rule: a batch whose every item is rejected for one reason, with
// nothing accepted, is a strike. Its rows are not failed yet: they stay
// pending and go again after stormRecheck. Strikes of one reason in a row
// (an acceptance or another reason ends the streak) make a storm once they
// number stormBatches and cover stormKeys distinct keys: then no row is
// failed, the destination is held as for a misconfigured URL (nothing sent
// but a probe every AuthProbeInterval; status, the misconfigured metric and
// its alert say why), and its rows, still pending, go once a probe is
// accepted. A streak that reaches stormBatches on fewer keys is the rows'
// own fault (the same few rows rejected again): they fail, with the
// reason. So a poison row among good ones fails at once (its batch is not
// a strike), and a poison row alone fails after stormBatches tries.
const (
	stormBatches = 3
	stormKeys    = 5
	stormRecheck = 2 * time.Second
)

// ErrRejectionStorm means every item of the destination's recent batches
// was rejected for one reason: the destination is held, and no row fails.
var ErrRejectionStorm = errors.New("delivery: rejection storm: every item of the destination's recent batches rejected for one reason")

// ErrWholeBatchRejected means every item of the batch was rejected for one
// reason while the streak is too short to tell a storm from bad rows: the
// rows stay pending, to go again after the error's wait.
var ErrWholeBatchRejected = errors.New("delivery: every item of the batch rejected for one reason; kept pending while syncer tells a rejection storm from bad rows")

// streak is the rejections of one reason in a row.
type streak struct {
	mu      sync.Mutex
	reason  string
	batches int
	keys    map[string]struct{}
}

func (s *streak) resetLocked() {
	s.reason, s.batches, s.keys = "", 0, nil
}

// judgeRejections reads a batch's outcome against the streak: nil lets
// the outcome stand (rejections fail their rows), an error keeps every
// row pending (a strike, or the storm's hold).
func (d *Deliverer) judgeRejections(ctx context.Context, out *Outcome) error {
	s := &d.streak
	if len(out.Rejected) == 0 && len(out.Accepted) == 0 {
		return nil
	}
	reason := ""
	if len(out.Accepted) == 0 {
		reason = out.Rejected[0].Error
		for _, r := range out.Rejected[1:] {
			if r.Error != reason {
				reason = ""
				break
			}
		}
	}
	s.mu.Lock()
	if reason == "" {
		s.resetLocked()
		s.mu.Unlock()
		return nil
	}
	if reason != s.reason {
		s.resetLocked()
		s.reason, s.keys = reason, map[string]struct{}{}
	}
	s.batches++
	for _, r := range out.Rejected {
		s.keys[r.Item.ID] = struct{}{}
	}
	batches, keys := s.batches, len(s.keys)
	if batches >= stormBatches && keys < stormKeys {
		s.resetLocked()
	}
	s.mu.Unlock()

	switch {
	case batches >= stormBatches && keys >= stormKeys:
		d.metrics.AddRejectionStorm()
		return d.refused(ctx, &d.conf, &thirdparty.Error{Err: fmt.Errorf("%w: %s", ErrRejectionStorm, reason)},
			"delivery: rejection storm: every item of "+strconv.Itoa(batches)+" batches ("+strconv.Itoa(keys)+
				" keys) rejected for one reason; no row is failed and nothing is sent but a probe until the destination accepts again (check destination "+d.cfg.Name+")")
	case batches >= stormBatches:
		d.logger.WarnContext(ctx, "delivery: the same rows rejected again for one reason: they fail",
			slog.Int("keys", keys), slog.String("reason", reason))
		return nil
	}
	return &WaitError{Err: fmt.Errorf("%w: %s", ErrWholeBatchRejected, reason), Wait: stormRecheck}
}
