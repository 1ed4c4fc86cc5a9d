// Package cloudevents is the destination format of the batched mode of the
// CloudEvents 1.0 HTTP binding (docs/protocol.md section  7): one request per
// batch, a JSON array of structured events, one per item.
//
// What it guarantees: an event's id is the item's key and version, and its
// time is the batch's recorded time, so a resend after a crash is the same
// body byte for byte; a tombstone is an event of its own type without data.
package cloudevents

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Name is the format's name in configuration.
const Name = "cloudevents"

// ContentType is the batched mode's content type.
const ContentType = "application/cloudevents-batch+json"

// Config configures a Format.
type Config struct {
	// Installation is the installation's id, for the default source.
	// Required unless EventSource is set. Defaults to "".
	Installation string
	// EventSource is every event's source attribute. Defaults to
	// "urn:syncer:<Installation>:<source>".
	EventSource string
	// EventTypePrefix starts every event's type, which ends in ".upserted"
	// or ".deleted". Defaults to "syncer.<source>".
	EventTypePrefix string
}

// Format is the cloudevents format.
type Format struct {
	cfg Config
}

// New returns the format, or an error naming the bad field.
func New(cfg *Config) (*Format, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.EventSource == "" && cfg.Installation == "" {
		return nil, errors.New("cloudevents: config: Installation is required without EventSource")
	}
	return &Format{cfg: *cfg}, nil
}

// Requests makes one request of the whole batch.
func (f *Format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	source := cmp.Or(f.cfg.EventSource, "urn:syncer:"+f.cfg.Installation+":"+b.Source)
	prefix := cmp.Or(f.cfg.EventTypePrefix, "syncer."+b.Source)
	src, _ := json.Marshal(source) // strings always marshal
	upserted, _ := json.Marshal(prefix + ".upserted")
	deleted, _ := json.Marshal(prefix + ".deleted")
	at, _ := json.Marshal(b.Time.UTC().Format(time.RFC3339Nano))

	size := 2
	for i := range b.Items {
		size += 200 + len(src) + len(b.Items[i].Payload)
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	ids := make([]string, len(b.Items))
	buf.WriteByte('[')
	var num [20]byte
	scratch := make([]byte, 0, 64)
	for i, it := range b.Items {
		ids[i] = it.ID
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"specversion":"1.0","id":`)
		buf.Write(thirdparty.AppendString(scratch[:0], ids[i]+":"+string(strconv.AppendInt(num[:0], it.Version, 10))))
		buf.WriteString(`,"source":`)
		buf.Write(src)
		buf.WriteString(`,"type":`)
		if it.Deleted {
			buf.Write(deleted)
		} else {
			buf.Write(upserted)
		}
		buf.WriteString(`,"subject":`)
		buf.Write(thirdparty.AppendString(scratch[:0], ids[i]))
		buf.WriteString(`,"time":`)
		buf.Write(at)
		if it.Deleted {
			buf.WriteByte('}')
			continue
		}
		buf.WriteString(`,"datacontenttype":"application/json","data":`)
		if len(it.Payload) == 0 {
			buf.WriteString("null")
		} else {
			buf.Write(it.Payload)
		}
		buf.WriteByte('}')
	}
	buf.WriteByte(']')
	return []thirdparty.Request{{ContentType: ContentType, Body: buf.Bytes(), IDs: ids, Items: b.Items}}, nil
}

// Read takes a 2xx as accepting the batch; anything else is read by the
// common rules (a 400 or 413 splits the batch down to the event refused).
func (f *Format) Read(_ *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	if !a.OK() {
		return nil, a.Refusal()
	}
	return &thirdparty.Result{}, nil
}
