package fakethirdparty

import (
	"hash/fnv"
	"math"
	"net/http"
	"strconv"
)

// ItemFailStatusDefault is the status of Config.ItemFailShare's items when
// Config.ItemFailStatus is zero.
const ItemFailStatusDefault = http.StatusServiceUnavailable

// ItemFails reports whether Config.ItemFailShare (share, 0..1) picks the
// item with this id: a fixed share of ids by their hash, the same at every
// request and in every process, so a client sees the same items answered
// transiently for as long as the knob is set, as a shard that stays
// unavailable for its documents, and a soak can tell which keys the fault
// holds.
func ItemFails(id string, share float64) bool {
	if share <= 0 {
		return false
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	// FNV's high bits barely move between ids that differ in their last
	// digit: mixed (splitmix64's finalizer) so a share is a share.
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x)/math.MaxUint64 < share
}

// itemFailVerdict is the answer of an item ItemFails picks: the item's
// own status in an elasticsearch bulk answer, the whole request's in a
// format of one item a request (standard-webhooks).
func itemFailVerdict(cfg Config) itemVerdict {
	status := cfg.ItemFailStatus
	if status == 0 {
		status = ItemFailStatusDefault
	}
	reason := "fake: item answered " + strconv.Itoa(status) + " by ItemFailShare"
	switch status {
	case http.StatusTooManyRequests:
		reason = "rejected execution of coordinating operation"
	case http.StatusServiceUnavailable:
		reason = "primary shard is not active"
	}
	return itemVerdict{status: status, reason: reason}
}

// answerLoaded adds Config.AnswerLoad to a custom answer's JSON object as
// "n", at write time, never in the answer remembered for the key: a replay
// after the knob is cleared is answered light, as a third party's answer
// to the same call varies with its own state.
func answerLoaded(body []byte, n int64) []byte {
	if n <= 0 || len(body) < 2 || body[0] != '{' {
		return body
	}
	out := make([]byte, 0, len(body)+24)
	out = append(out, `{"n":`...)
	out = strconv.AppendInt(out, n, 10)
	if body[1] != '}' {
		out = append(out, ',')
	}
	return append(out, body[1:]...)
}
