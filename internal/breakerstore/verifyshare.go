package breakerstore

import (
	"context"
	"time"
)

// KeyVerifyShare holds a VerifyShare.
const KeyVerifyShare = "verify_share"

// VerifyShare is the share of the destination's request rate that a
// `syncer verify` run from the command line takes while it runs: that
// process is not the daemon whose deliverer keeps the destination's rate
// limit, so it says here how much it takes, and every deliverer of the
// namespace sends at the rest (delivery reads it with the other facts).
// It is a lease: a verify renews Until while it runs and sets Share to 0
// when it ends, and one killed stops counting at Until.
type VerifyShare struct {
	// Share is the part of the rate the verify takes, in [0, 1).
	Share float64 `json:"share"`
	// Until is when the share ends unless renewed.
	Until time.Time `json:"until"`
}

// Active is the share in force at now: 0 once Until has passed.
func (v VerifyShare) Active(now time.Time) float64 {
	if !v.Until.After(now) || v.Share <= 0 {
		return 0
	}
	return min(v.Share, 1)
}

// SetVerifyShare records the command line verify's share.
func (s *Store) SetVerifyShare(ctx context.Context, v VerifyShare) error {
	return s.put(ctx, KeyVerifyShare, v)
}
