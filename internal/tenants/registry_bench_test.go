package tenants_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/syncer-dev/syncer/internal/lab/fakethirdparty"
	"github.com/syncer-dev/syncer/internal/tenants"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// BenchmarkForKnownTenant is the cost of asking for a tenant whose
// deliverer is built (the pipeline asks once per batch), among 10,000
// tenants; it reports the heap each built tenant holds.
func BenchmarkForKnownTenant(b *testing.B) {
	bd := setup(b, fakethirdparty.Config{})
	r := bd.registry(b, tenants.Config{ThirdParty: thirdparty.Config{URL: bd.url + "/t/{tenant}"}})
	const n = 10_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprint("tenant-", i)
		if _, err := r.For(b.Context(), names[i]); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := r.For(b.Context(), names[i%n]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-bytes/tenant")
}
