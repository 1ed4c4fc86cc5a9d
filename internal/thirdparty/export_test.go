package thirdparty

import "bytes"

// EncodeForBenchmark exposes the batch encoder to the external benchmark,
// pooling its buffer as Push does.
func EncodeForBenchmark(items []Item) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	encodeBatch(buf, items)
	bufPool.Put(buf)
}
