package dbtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer safe for a writer (a process's output, a
// logger of goroutines) and a test's reads at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
