// Package delivery turns "push this batch" into the right sequence of HTTP
// requests to the third party and maps what it answered to an Outcome of
// accepted and rejected items, or to an error that says how long to wait.
//
// What a Deliverer guarantees:
//
//   - Pacing. Every request it sends (first tries, retries and split halves)
//     takes a token from one rate.Limiter of Config.RateLimit requests a
//     second with bursts of Config.RateBurst. The limiter is this process's,
//     yet the limit holds across daemons: only the holder of the export
//     lock pushes, so at any time one Deliverer talks to the third party.
//   - 429. Once the third party answers 429, nothing more is sent by this
//     Deliverer before its Retry-After (1s when absent) has passed: a gate
//     time checked before every request, after the limiter's wait too. A
//     short wait (Config.MaxInlineWait) is waited out and the same key sent
//     again; a longer one is returned as a *WaitError. A 429 fails no row
//     and does not count against the circuit breaker.
//   - Transient failures (408, 409, 5xx, timeouts, connection errors) are
//     retried with exponential backoff and jitter under the same
//     Idempotency-Key, for at most Config.MaxElapsed; then a *WaitError
//     wrapping ErrGaveUp. They alone count for the circuit breaker.
//   - Circuit breaker. Config.BreakerFailures consecutive transient failures
//     open it for Config.BreakerOpenTimeout; while it is open Deliver sends
//     nothing and returns a *WaitError wrapping ErrBreakerOpen with the time
//     left; then one probe decides between closing and opening again. The
//     breaker is gobreaker's DistributedCircuitBreaker, its state kept in
//     the store given to New (PostgreSQL in the daemon, see
//     internal/breakerstore), so a daemon that takes the export lock over
//     inherits what its predecessor learnt about the third party.
//   - Whole-batch refusals (413, 400, 422) split the batch in halves, each
//     sent under thirdparty.IdempotencyKey(salt, half), so a resend after a
//     crash splits the same way under the same keys; a single item still
//     refused becomes a Rejection. Refusals do not count for the breaker.
//   - Refused credentials (401, 403) fail no row: Deliver returns a
//     *WaitError wrapping ErrCredentials after Config.AuthProbeInterval, and
//     the fact is recorded through Config.State and logged once per change,
//     as is its end at the next accepted request.
//
// A Deliverer starts no goroutine and is safe for concurrent use; requests
// through the breaker are sent one at a time.
package delivery
