// Package thirdparty is the HTTP client of the third-party wire protocol
// (CONTRACT.md section 2): it pushes one batch of items and says what became
// of it.
//
// What it guarantees:
//
//   - One call to [Client.Push] is one HTTP request, never retried here. Retry,
//     backoff, rate limiting and circuit breaking belong to the caller, which
//     knows about shutdown and shares limits across workers. (net/http may
//     replay a request on a keep-alive connection that died before anything
//     was read; it does so only because the request carries an
//     Idempotency-Key, which makes that replay harmless.)
//   - The same batch content always yields the same [IdempotencyKey], in any
//     process, so a batch sent again after a crash or a transient error is
//     recognised by the third party.
//   - Every failure is an [*Error] (or wraps the caller's context error) that
//     says by behaviour what the caller should do: [Error.Transient],
//     [Error.RateLimited], [Error.BatchRefused], [Error.AuthRefused], or in one
//     word [Classify].
//   - A 2xx answer is a [Result]: items it names as rejected are rejected,
//     every other item of the batch is accepted.
//   - The bearer token never appears in an error, even when the third party
//     echoes it back in a response body.
//
// Payloads are written through as raw JSON without being decoded or
// validated: they come from a jsonb column and are valid by construction, and
// re-encoding them would cost more than the rest of the request.
package thirdparty
