// Package fakethirdparty is a stand-in third party that speaks the wire
// protocol of docs/protocol.md, section 2: the project's test double and the
// target of `syncer fake-thirdparty` in demos and benchmarks.
//
// What it guarantees:
//
//   - It is strict where the contract is: wrong method (405), wrong
//     Content-Type (415), a body that is not {"items":[...]}, an empty batch,
//     an id that is not a decimal string, a version below 1, a repeated id in
//     one batch, an item without payload that is not a tombstone, a
//     tombstone ("deleted": true) with a payload, or a missing
//     Idempotency-Key are answered 400, so a client bug shows up as a
//     refused batch rather than passing silently.
//   - It honours Idempotency-Key as the contract asks of a third party: a
//     batch whose key was already answered with 2xx is answered again with
//     the same status and body and accepts nothing. Only 2xx answers are
//     remembered: a refusal, 429 or 5xx changed nothing, so a retry under the
//     same key is processed afresh, as real idempotency layers do. A key
//     reused for a batch of different (id, version) pairs is answered 422
//     and counted in Stats.KeyConflicts: the client broke its promise.
//   - It records what it saw so tests and benchmarks can judge delivery:
//     every request, every accepted (id, version) and whether it was a
//     tombstone, duplicates split by whether they came under the same key,
//     versions accepted out of order, the most requests in flight at once,
//     ids that arrived while another unanswered request held them, requests
//     over an advertised quota, and the busiest second.
//   - It can misbehave as real endpoints do (Config): redirects, 2xx
//     answers that are not the contract's (HTML, malformed, huge, unknown
//     status words or ids; such an answer accepts nothing), raw Retry-After
//     values, a bare 429 past an unannounced rate, and an advertised quota
//     (RateLimit-* and X-RateLimit-* on every answer). Memory grows with distinct pairs and accepted
//     items (a few dozen bytes each), never with payload size.
//   - With Config.Format it speaks a destination format of docs/protocol.md
//     section 6 on every path but /v1/ (formats.go): standard-webhooks
//     (signatures verified with Config.SigningSecret, webhook-id honoured
//     as the key), cloudevents batches, the Elasticsearch bulk API with
//     external versions (409 for a version held, 404 for a delete of
//     nothing, item-level 429 and 400), and a HubSpot-like custom API
//     answering 207. A fixed share of ids can stay 503 or 429 for as long
//     as a test wants (Config.ItemFailShare: per item in a bulk answer, per
//     request in standard-webhooks), and custom answers can carry a count
//     for a response program to iterate over (Config.AnswerLoad). Each request is read into the same batch as syncer's
//     own, so every check, record and count above holds for every format,
//     and Stats.KeyBodyConflicts counts a key that came with two bodies.
//   - With Config.Lookup it keeps the latest accepted item of every id
//     (payload included: the one knob whose memory grows with payloads)
//     and answers POST /v1/lookup, and _mget as Elasticsearch does, from
//     what it holds (lookup.go, mget.go), for `syncer verify`; ApplyDrift
//     and POST /v1/admin/drift lose, edit and re-create items and make ids
//     unknown, as a third party's own users and imports would. Reads pass
//     the outage, token and rate limit batches pass, under one limiter.
//   - With Config.EchoAuthorization it quotes the Authorization it was
//     sent (echo.go): POST /oauth/token (a tenant's too) refuses every
//     grant quoting the header and the form, and lookups add the header to
//     every payload, as careless identity providers and APIs do, for tests
//     that look for a secret in every form (issue 54).
//   - It is many accounts at once: every route again under /t/{tenant}/ is
//     that tenant's own account (tenants.go), with its own records and
//     checks, its own limiter (Config.Tenants.RateLimit, unannounced unless
//     Announced) and its own token (TokenPrefix+tenant), which an admin
//     route revokes and restores. An account is made at its first request
//     and costs a few KiB and its records: no goroutine or timer a tenant.
//   - It is safe for concurrent use, and its knobs (Config) can change while
//     it serves, so a test can switch a failure on and off mid-run.
//
// Payloads are never decoded unless Config.RejectField or Config.PoisonField
// asks for their top-level keys: on a machine shared with the database and
// the daemon, the fake must not be what a benchmark measures.
package fakethirdparty
