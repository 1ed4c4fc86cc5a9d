// Package thirdparty is the HTTP client of the third-party wire protocol
// (docs/protocol.md, section 2): it pushes one batch of items and says what became
// of it.
//
// What it guarantees:
//
//   - One call to [Client.PushBody] is one HTTP request with exactly the
//     given body, never retried here. Retry, backoff, rate limiting and
//     circuit breaking belong to the caller, which knows about shutdown and
//     shares limits across workers. (net/http may replay a request on a
//     keep-alive connection that died before anything was read; it does so
//     only because the request carries an Idempotency-Key, which makes that
//     replay harmless.)
//   - One key, one body: [BatchKey] hashes the installation, the salt and
//     the exact body, and [AppendBatch] is deterministic; [DecodeBatch]
//     accepts only what AppendBatch writes, so decoding and encoding again
//     gives the same bytes.
//   - Acceptance is positive: a 2xx counts only when its body is empty or is
//     the contract's results naming ids of the batch, each once, with status
//     "accepted" or "rejected". Any other 2xx (HTML, malformed, oversized,
//     an unknown status word or id) is a transient [*Error] with BadAnswer
//     set, retried under the same key, never an acceptance.
//   - Redirects are never followed, whatever http.Client is passed: a 3xx is
//     a configuration error ([Error.ConfigRefused], like 404 and 410), so the
//     batch and the token only ever go to the configured origin.
//   - Every failure is an [*Error] (or wraps the caller's context error) that
//     says by behaviour what the caller should do: [Error.Transient],
//     [Error.RateLimited], [Error.BatchRefused], [Error.AuthRefused],
//     [Error.ConfigRefused], or in one word [Classify].
//   - Text that came from the third party (error bodies, rejection reasons,
//     Retry-After, Location) leaves this package only through [SafeText]:
//     bounded, control characters escaped, the token removed even when
//     echoed back URL-escaped. URLs in errors are redacted ([RedactURL]): no
//     query string, userinfo or fragment, so an ?api_key= never reaches a
//     log.
//   - Rate-limit headers (RateLimit-*, RateLimit, X-RateLimit-*) are read on
//     every answer into [Quota]; garbage in them is ignored, never trusted.
//     Retry-After is read without a cap (and without overflow): capping it
//     is the caller's policy.
//
// Payloads are written through as raw JSON without being decoded or
// validated: they come from a jsonb column and are valid by construction, and
// re-encoding them would cost more than the rest of the request.
package thirdparty
