// Package conformance checks syncer's destination formats against the
// specifications' own code: Standard Webhooks requests verified by the
// specification's Go library, CloudEvents batches read by the CloudEvents
// Go SDK. It is a module of its own, so the daemon's module graph does not
// carry those libraries.
package conformance
