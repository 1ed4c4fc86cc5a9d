package elasticsearch

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// BenchmarkAnswer reads a bulk answer of 500 items with the fast path and
// with encoding/json.
func BenchmarkAnswer(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"took":0,"errors":false,"items":[`)
	for i := range 500 {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"index":{"_index":"fake","_id":"%d","_version":1,"result":"created","status":201}}`, i)
	}
	buf.WriteString(`]}`)
	body := buf.Bytes()
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := scanAnswer(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var a answer
			if err := json.Unmarshal(body, &a); err != nil {
				b.Fatal(err)
			}
		}
	})
}
