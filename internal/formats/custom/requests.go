package custom

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/itchyny/gojq"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// ProgramError is a request program that failed on the items it was given
// (an error, a wrong output, its time or byte bound passed): a batch the
// format cannot send. The deliverer renders the items one by one, and
// rejects those it fails on with it as their reason.
type ProgramError struct {
	Field string
	Err   error
}

func (e *ProgramError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *ProgramError) Unwrap() error { return e.Err }

// ProgramFailed marks the error for the deliverer, which does not import
// this package.
func (e *ProgramError) ProgramFailed() bool { return true }

// Requests makes the requests of a batch: upserts (and tombstones without
// deletes) in one request, tombstones in another; or one per item.
func (f *Format) Requests(b *thirdparty.Batch) ([]thirdparty.Request, error) {
	now := float64(b.Time.Unix())
	var ups, dels []thirdparty.Item
	if f.deletes == nil {
		ups = b.Items
	} else {
		for _, it := range b.Items {
			if it.Deleted {
				dels = append(dels, it)
			} else {
				ups = append(ups, it)
			}
		}
	}
	var reqs []thirdparty.Request
	for _, g := range []struct {
		p     *program
		items []thirdparty.Item
	}{{&f.upsert, ups}, {f.deletes, dels}} {
		if len(g.items) == 0 {
			continue
		}
		if !g.p.perItem {
			r, err := g.p.request(b.Source, g.items, now, f.tenant)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, r)
			continue
		}
		for i := range g.items {
			r, err := g.p.request(b.Source, g.items[i:i+1:i+1], now, f.tenant)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, r)
		}
	}
	return reqs, nil
}

// request runs the body program once for items (one item when perItem).
func (p *program) request(source string, items []thirdparty.Item, now float64, t *tenantBinding) (thirdparty.Request, error) {
	ids := make([]string, len(items))
	for i := range items {
		ids[i] = items[i].ID
	}
	r := thirdparty.Request{Method: p.method, Path: p.path, IDs: ids, Items: items, PerItem: p.perItem}
	// {source} is the batch's source, so one destination (one token, one
	// limit) serves several objects of one API. Every placeholder is
	// replaced in one pass: a value holding "{id}" is never expanded again.
	// {tenant} is the tenant's value (ForTenant), escaped the same way.
	if p.perItem {
		r.Path = strings.NewReplacer("{source}", url.PathEscape(source), "{id}", url.PathEscape(ids[0]),
			"{version}", strconv.FormatInt(items[0].Version, 10), "{tenant}", t.pathValue()).Replace(p.path)
	} else if strings.Contains(p.path, "{") {
		r.Path = strings.NewReplacer("{source}", url.PathEscape(source), "{tenant}", t.pathValue()).Replace(p.path)
	}
	if p.body == nil {
		return r, nil
	}
	var in any
	if p.perItem {
		v, err := itemValue(&items[0])
		if err != nil {
			return r, err
		}
		in = v
	} else {
		list := make([]any, len(items))
		for i := range items {
			v, err := itemValue(&items[i])
			if err != nil {
				return r, err
			}
			list[i] = v
		}
		in = map[string]any{"source": source, "items": list}
	}
	r.ContentType = p.contentType
	var buf bytes.Buffer
	b, stop := newBudget(p.bounds.timeout, p.bounds.maxBytes)
	defer stop()
	fail := func(err error) (thirdparty.Request, error) {
		if over := b.overrun(p.bounds.timeout); over != nil {
			err = over
		}
		return r, &ProgramError{Field: p.bodyField, Err: err}
	}
	iter := p.body.RunWithContext(b, in, now, t.value())
	n := 0
	for {
		v, ok := iter.Next()
		if !ok {
			break
		}
		if err, ok := v.(error); ok {
			return fail(err)
		}
		n++
		if n > 1 && p.contentType != NDJSON {
			return fail(fmt.Errorf("gives more than one output (only %s takes several)", NDJSON))
		}
		out, err := gojq.Marshal(v)
		if err != nil {
			return fail(err)
		}
		buf.Write(out)
		if p.contentType == NDJSON {
			buf.WriteByte('\n')
		}
		if buf.Len() > p.maxBytes {
			return fail(fmt.Errorf("writes a body past the request's byte limit (%d bytes)", p.maxBytes))
		}
	}
	if n == 0 {
		return fail(errors.New("gives no output"))
	}
	r.Body = buf.Bytes()
	return r, nil
}

// itemValue is an item as the programs see it; numbers in payloads keep
// their precision.
func itemValue(it *thirdparty.Item) (map[string]any, error) {
	m := map[string]any{"id": it.ID, "version": int(it.Version)}
	if it.Deleted {
		m["deleted"] = true
		return m, nil
	}
	var payload any
	if len(it.Payload) > 0 {
		dec := json.NewDecoder(bytes.NewReader(it.Payload))
		dec.UseNumber()
		if err := dec.Decode(&payload); err != nil {
			return nil, fmt.Errorf("item %s: payload: %w", it.ID, err)
		}
	}
	m["payload"] = payload
	return m, nil
}
