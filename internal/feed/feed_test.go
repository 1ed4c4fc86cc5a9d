package feed

import (
	"testing"
	"time"
	"unsafe"
)

// An Item is copied by value at every stage of the pipeline: its size is
// what each copy allocates (issue 55: 120 bytes were a tenth of a
// drain's allocation).
func TestItemStaysSmall(t *testing.T) {
	if n := unsafe.Sizeof(Item{}); n > 72 {
		t.Fatalf("feed.Item is %d bytes, more than 72", n)
	}
}

func TestItemCapturedRoundTrip(t *testing.T) {
	var it Item
	if !it.Captured().IsZero() || it.Tenant() != "" || it.Kept() != nil {
		t.Fatalf("zero Item says something: %v %q %v", it.Captured(), it.Tenant(), it.Kept())
	}
	at := time.Date(2026, 11, 29, 8, 0, 0, 123456789, time.UTC)
	it.SetCaptured(at)
	if want := at.Truncate(time.Microsecond); !it.Captured().Equal(want) {
		t.Fatalf("captured %v, want %v", it.Captured(), want)
	}
	it.SetCaptured(time.Time{})
	if it.CapturedAt != 0 || !it.Captured().IsZero() {
		t.Fatalf("zero time kept as %d", it.CapturedAt)
	}
}

func TestMetaOfSharesAPageArray(t *testing.T) {
	var metas []Meta
	if m := MetaOf(&metas, 4, "", nil); m != nil {
		t.Fatalf("a Meta of nothing: %+v", m)
	}
	a := MetaOf(&metas, 4, "t1", nil)
	b := MetaOf(&metas, 4, "", []byte{1})
	for range 10 { // past the first array: earlier Metas stay as they were
		MetaOf(&metas, 4, "t2", nil)
	}
	if a.Tenant != "t1" || b.Kept[0] != 1 || b.Tenant != "" {
		t.Fatalf("metas changed: %+v %+v", a, b)
	}
}
