// Package tenants gives each tenant of a destination its own deliverer
// (docs/protocol.md section 10): the destination's configuration with the
// tenant's URL, credentials and headers, read from the application's own
// connections table by the destination's tenants.query, and its shared
// facts (breaker, learnt rate, refusal, pause, probe) in a namespace of
// its own (breakerstore.TenantNamespace).
//
// What it guarantees:
//
//   - A tenant's deliverer is built on its first use and kept while it is
//     used; an idle one is forgotten at a later use of the registry. No
//     goroutine, timer or database session exists per tenant: thousands
//     of idle tenants cost only their map entries until they are evicted.
//   - A tenant's connection row is read at most once per RefreshEvery (30
//     s), and at its next use after the third party refused its
//     credentials (401 or 403 after one fresh token); while they stand
//     refused, once per UnconnectedEvery (10 s). A row that differs
//     from the one its deliverer was built from builds a new deliverer,
//     which sends at once: a new token resumes a refused tenant without a
//     probe interval. A tenant without a row is unconnected
//     (ErrUnconnected): its rows wait, and go once a row appears, within
//     UnconnectedEvery (10 s), without a restart.
//   - The query never holds the export (docs/protocol.md section 10.1):
//     each run has Settings.Timeout as its statement and lock timeout, set
//     for its own transaction; every registry of a daemon shares one
//     QueryGate, so at most QueryConnsDefault (2) runs hold a connection
//     at once (a refresh grant's read aside: it runs on the connection
//     the grant holds for the token endpoint, one per tenant at a time).
//     A command's check (HasRow) has the same timeouts. A tenant with a deliverer has its row read again behind its
//     batches (in a goroutine only while a slot is free) and goes on with
//     the row it has while the query cannot run.
//   - A tenant is never sent when its value is empty, "." or "..", or
//     holds a control character (Invalid, ErrInvalid), and a query that
//     fails for it is its state (*QueryError: the SQLSTATE and condition
//     name, never PostgreSQL's message).
//   - What the query returns is never written anywhere: not to a log, an
//     error, syncer's tables or the format's recorded bodies ($tenant in a
//     program holds the row's other columns only, never its credentials).
//     A rotated refresh token goes to on_refresh, the application's own
//     statement, and nowhere else.
//   - A refresh token is spent once (refresh.go): every refresh_token
//     grant, by any syncer process, runs in a transaction holding the
//     tenant's advisory lock, spends the token stored then (the query run
//     again), and stores a rotated one with on_refresh before the lock
//     goes; after invalid_grant it asks once more if another token was
//     stored meanwhile. A process never spends a token it already spent.
//     A reader outside the daemon (Config.Reader) spends none without
//     on_refresh (ErrRefreshNotShared).
package tenants
