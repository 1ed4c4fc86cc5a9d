package soak

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
)

// One key, one body (section 2): the fronts keep the first body each
// Idempotency-Key came with, so that a key that comes with another is
// reported with both, which is what finding its cause takes (the seed
// alone replays the schedule, not the daemons' timing). Bodies are kept
// packed: a 10-minute run sends some 5,000 requests of up to 100 items.

// keptBody is the first body a key came with.
type keptBody struct {
	sum    [sha256.Size]byte
	path   string
	at     time.Time
	packed []byte // s2
}

func keepBody(sum [sha256.Size]byte, path string, body []byte, at time.Time) keptBody {
	return keptBody{sum: sum, path: path, at: at, packed: s2.Encode(nil, body)}
}

func (k keptBody) body() []byte {
	b, err := s2.Decode(nil, k.packed)
	if err != nil {
		return []byte(fmt.Sprintf("(unreadable: %v)", err))
	}
	return b
}

// keyConflict is a key that came with a second body.
type keyConflict struct {
	key           string
	first, second keptBody
}

// conflictExcerpt bounds each body in the report; the files hold them
// whole.
const conflictExcerpt = 2048

// describe says what the two bodies of the key held, each item by id and
// version, and the bodies themselves (bounded), with their times into the
// run; it writes them whole into dir when dir is not empty.
func (c keyConflict) describe(format string, start time.Time, dir string, n int) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Idempotency-Key %q came with a second body", c.key)
	for i, k := range []keptBody{c.first, c.second} {
		body := k.body()
		fmt.Fprintf(&sb, "\n            body %d at %s, %s, %d bytes, items %s", i+1,
			k.at.Sub(start).Round(100*time.Millisecond), k.path, len(body), itemList(format, k.path, body))
		ex := body
		if len(ex) > conflictExcerpt {
			ex = ex[:conflictExcerpt]
		}
		fmt.Fprintf(&sb, "\n            %s", ex)
		if len(ex) < len(body) {
			sb.WriteString(" ...")
		}
		if dir != "" {
			f := filepath.Join(dir, fmt.Sprintf("key-conflict-%d-body-%d", n, i+1))
			if err := os.WriteFile(f, body, 0o644); err == nil {
				fmt.Fprintf(&sb, "\n            (whole in %s)", f)
			}
		}
	}
	return sb.String()
}

// itemList names a body's items: id@version, a tombstone marked so.
func itemList(format, path string, body []byte) string {
	items := sentItems(format, path, body)
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = fmt.Sprintf("%s@%d", it.ID, it.Version)
		if it.Deleted {
			parts[i] += "(deleted)"
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}
