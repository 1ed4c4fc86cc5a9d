package exporter

import (
	"testing"

	"go.uber.org/goleak"
)

// The exporter starts goroutines for every push and mark; none may outlive
// the tests that started them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
