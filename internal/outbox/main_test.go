package outbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The relay starts goroutines (its listener, River's insert-only client):
// none may outlive a test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
