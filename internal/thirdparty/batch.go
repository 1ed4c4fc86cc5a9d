package thirdparty

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
)

// AppendBatch appends the request body of items to dst and returns it. The
// encoding is deterministic: the same items always give the same bytes, so a
// body can be re-derived (for a split half, say) byte for byte.
func AppendBatch(dst []byte, items []Item) []byte {
	buf := bytes.NewBuffer(dst)
	encodeBatch(buf, items)
	return buf.Bytes()
}

// DecodeBatch reads a body made by AppendBatch back into its items, payloads
// kept raw, so a recorded body can be split after a crash into the very
// halves it would have been split into before.
func DecodeBatch(body []byte) ([]Item, error) {
	var w struct {
		Items []struct {
			ID      string          `json:"id"`
			Version int64           `json:"version"`
			Payload json.RawMessage `json:"payload"`
			Deleted bool            `json:"deleted"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, fmt.Errorf("thirdparty: decode batch: %w", err)
	}
	items := make([]Item, len(w.Items))
	for i, it := range w.Items {
		id, err := strconv.ParseInt(it.ID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("thirdparty: decode batch: item %d: id: %w", i, err)
		}
		items[i] = Item{ID: id, Version: it.Version, Payload: it.Payload, Deleted: it.Deleted}
	}
	return items, nil
}

// batchKeyDomain separates these hashes from IdempotencyKey's and from any
// other SHA-256 of similar bytes.
const batchKeyDomain = "syncer idempotency key v2\x00"

// BatchKey derives the Idempotency-Key of a request body: a SHA-256 over the
// installation's identity, the salt and the exact body, so two installations
// never share a key, and one key never names two bodies.
func BatchKey(installation, salt string, body []byte) string {
	h := sha256.New()
	var n [8]byte
	_, _ = h.Write([]byte(batchKeyDomain))
	for _, part := range []string{installation, salt} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		_, _ = h.Write(n[:])
		_, _ = h.Write([]byte(part))
	}
	_, _ = h.Write(body)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return "syncer-" + hex.EncodeToString(sum[:])
}

// PushBody sends an already encoded body (AppendBatch) under key. ids are
// the ids the body holds, so the answer can be checked against them.
func (c *Client) PushBody(ctx context.Context, key string, body []byte, ids []int64) (*Result, error) {
	items, err := DecodeBatch(body)
	if err != nil {
		return nil, err
	}
	return c.Push(ctx, key, items)
}
