// Package delivery turns "push this batch" into the right sequence of HTTP
// requests to the third party and maps what it answered to an Outcome of
// accepted and rejected items, or to an error that says how long to wait.
//
// What a Deliverer guarantees:
//
//   - One key, one body. A batch goes as Batch.Body (the bytes the exporter
//     recorded) under Batch.Key, on every retry; split halves are encoded
//     with thirdparty.AppendBatch and keyed with thirdparty.BatchKey over
//     Config.Installation, the salt and the half's body, so a resend after
//     a crash splits the same way under the same keys.
//   - Requests in flight. Deliver may be called from many goroutines; at
//     most Config.MaxInFlight requests are unanswered at once (a slot is
//     held from the rate limiter's wait to the answer, retries and halves
//     included). The pauses, the refusals, the rate limiter and the breaker
//     are shared by all of them.
//   - Pacing. Every request waits for one rate.Limiter set to the lowest
//     of: Config.RateLimit; the rate learnt from bare 429s (no Retry-After,
//     no quota), by the estimator (estimate.go): no ceiling is ever set
//     from a 429 that comes before a second of requests could be measured
//     (a fresh client's first burst); slow start doubles the rate every
//     second until a 429, holds it a second to measure what the third
//     party accepts at it, and sets the ceiling from that; from there each
//     429 lowers the rate multiplicatively (once per overshoot) and
//     accepted requests raise it back quickly to where the 429s began, then
//     probe past it, faster the longer nothing is refused; and an
//     advertised quota (RateLimit-* / X-RateLimit-*): what remains is
//     spread over what remains of the window. The limiter is this
//     process's, yet the limit holds across daemons: only the holder of the
//     export lock pushes.
//   - Pauses. A 429's Retry-After (capped at Config.MaxRetryAfter, logged
//     at warn with the raw value when cut) or a quota with nothing remaining
//     stops every request until it ends. A short pause is waited out inside
//     Deliver (Config.MaxInlineWait); a longer one is returned as a
//     *WaitError wrapping ErrPaused. A 429 fails no row and does not count
//     against the circuit breaker.
//   - Transient failures (408, 409, 5xx, timeouts, connection errors, a 2xx
//     whose body is not an answer) are retried with exponential backoff and
//     jitter under the same Idempotency-Key and body, for at most
//     Config.MaxElapsed; then a *WaitError wrapping ErrGaveUp. They alone
//     count for the circuit breaker. Nothing is accepted that a well-formed
//     2xx answer did not accept.
//   - Circuit breaker. Config.BreakerFailures consecutive transient failures
//     open it for Config.BreakerOpenTimeout; while it is open Deliver sends
//     nothing and returns a *WaitError wrapping ErrBreakerOpen with the time
//     left; then one probe decides between closing and opening again.
//     Another daemon's breaker is inherited as it stands: open until its
//     expiry, then half-open (one probe), never closed because its open
//     period ran out.
//   - Whole-batch refusals (413, 400, 422) split the batch in halves; a
//     single item still refused becomes a Rejection. Refusals do not count
//     for the breaker.
//   - Standing refusals fail no row: bad credentials (401, 403) and a wrong
//     URL (a redirect, never followed; 404; 410) stop every request for
//     Config.AuthProbeInterval, returned as a *WaitError wrapping
//     ErrCredentials or ErrConfiguration; then one request probes.
//   - Shared facts. With a Store (internal/breakerstore), the breaker's
//     state, the refusals, the pauses, the learnt rate and the last error
//     are recorded for every daemon and `syncer status`, and read back
//     before sending (at most once a second), so a daemon that takes the
//     export lock over honours its predecessor's pause and breaker and
//     goes on from the rate it learnt (slow start or probe, as it stood).
//     Each configured destination has its own Deliverer and its own
//     namespace in the store: its own rate, breaker, pause and refusals.
//   - Causes, loudly. Every change of state is logged once, at warn or
//     error, with the status and a bounded, token-free excerpt of the answer
//     (thirdparty.SafeText): the breaker opening and closing, a pause
//     beginning, a refusal and its end, a batch refused, a bad 2xx answer, a
//     learnt rate moving by more than half.
//
// A Deliverer starts no goroutine and is safe for concurrent use.
package delivery
