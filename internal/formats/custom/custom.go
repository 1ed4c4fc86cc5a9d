// Package custom is the destination format described by jq programs
// (docs/protocol.md section  7): the configuration says how a batch (or an item)
// becomes a request and how an answer is read, so any JSON API can take
// syncer's rows without an adapter in between.
//
// What it guarantees:
//
//   - Programs are compiled once, by New; a program that does not compile
//     is an error naming its field (request.body, response.accepted...).
//   - A body is a function of the items, the source and the batch's
//     recorded time: `now` is the batch's time, `env` and `$ENV` are empty
//     and `input` is refused, so a program cannot make a resend differ from
//     the first send. Objects are written with sorted keys.
//   - Each program runs once per request, never per item of a request.
//   - Acceptance is positive: response.accepted must say true, and a
//     program that fails, gives a value of the wrong type or names an id the
//     request did not hold makes the answer no answer (nothing is marked,
//     the request goes again), with the field and the error in the text.
package custom

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/itchyny/gojq"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// Name is the format's name in configuration.
const Name = "custom"

// Defaults for a Request.
const (
	MethodDefault      = http.MethodPost
	ContentTypeDefault = "application/json"
	// NDJSON is the content type whose body is one line per output.
	NDJSON = "application/x-ndjson"
)

// Request says how requests are made.
type Request struct {
	// Method defaults to MethodDefault (deletes: the request's).
	Method string
	// Path is appended to the destination's URL; with PerItem it may hold
	// {id} (percent-escaped) and {version}. Defaults to "" (deletes: the
	// request's).
	Path string
	// Body is a jq program: it takes {"source", "items"} (PerItem: the
	// item) and its one output is the body. Defaults to "." (deletes: the
	// request's, and with PerItem none: a delete is sent without a body).
	Body string
	// ContentType defaults to ContentTypeDefault; NDJSON writes one line
	// per output of Body.
	ContentType string
	// PerItem sends one request per item. Defaults to false.
	PerItem bool
}

// Config configures a Format.
type Config struct {
	// Request makes the requests. Required fields: none.
	Request Request
	// Deletes, when set, sends tombstones in requests of their own, each
	// field defaulting to Request's. Defaults to nil: tombstones go with
	// the other items.
	Deletes *Request
	// Accepted is a jq program that takes {"status", "headers", "body"}
	// and must give true for a 2xx to count. Defaults to "" (any 2xx).
	Accepted string
	// Rejected is a jq program that takes the same and gives a list of
	// {"id", "error"}: those items are rejected. Defaults to "" (none).
	Rejected string
	// Refused is a jq program that takes what Accepted takes, for any
	// status, and gives true when the answer refuses the credentials (a
	// 403 wrapped in a 400, as PocketBase's batch API does): the
	// destination is held as for a 401, nothing fails. Defaults to ""
	// (the status alone says).
	Refused string
	// Retry is the same for an answer that is transient: retried under
	// backoff, nothing fails. Defaults to "".
	Retry string
	// ProgramTimeout bounds one run of a request program: past it, the
	// program fails (a *ProgramError) and no core is held. Defaults to
	// ProgramTimeoutDefault.
	ProgramTimeout time.Duration
	// MaxBodyBytes bounds a request body a program writes: past it, the
	// program fails. Defaults to MaxBodyBytesDefault.
	MaxBodyBytes int
}

// Defaults of a Config's bounds.
const (
	ProgramTimeoutDefault = time.Second
	MaxBodyBytesDefault   = 16 << 20
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

// program is one compiled request shape.
type program struct {
	method, path, contentType string
	body                      *gojq.Code // nil: no body
	bodyField                 string
	perItem                   bool
	timeout                   time.Duration
	maxBytes                  int
}

// Format is the custom format. Create it with New.
type Format struct {
	upsert   program
	deletes  *program
	accepted *gojq.Code
	rejected *gojq.Code
	refused  *gojq.Code
	retry    *gojq.Code
}

// nowVar is the variable that holds the batch's time for `now`.
const nowVar = "$__syncer_now"

// compile compiles a program of field with what makes it deterministic.
func compile(field, src string) (*gojq.Code, error) {
	q, err := gojq.Parse("def now: " + nowVar + "; " + src)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	code, err := gojq.Compile(q,
		gojq.WithVariables([]string{nowVar}),
		gojq.WithEnvironLoader(func() []string { return nil }),
	)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return code, nil
}

// New compiles cfg's programs, or returns an error naming the field.
func New(cfg *Config) (*Format, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	f := &Format{}
	r := cfg.Request
	up, err := newProgram("request", r, r.PerItem, cmp.Or(r.Body, "."))
	if err != nil {
		return nil, err
	}
	f.upsert = up
	if d := cfg.Deletes; d != nil {
		// deletes.per_item stands on its own: deletes one by one (a
		// 404-tolerant DELETE per row) beside batched upserts.
		perItem := r.PerItem || d.PerItem
		body := d.Body
		if body == "" && !perItem {
			body = cmp.Or(r.Body, ".")
		}
		dr := Request{Method: cmp.Or(d.Method, r.Method), Path: cmp.Or(d.Path, r.Path), ContentType: cmp.Or(d.ContentType, r.ContentType)}
		if d.PerItem && !r.PerItem && d.Path == "" {
			return nil, errors.New("deletes.path: required with deletes.per_item when request is not per item")
		}
		dp, err := newProgram("deletes", dr, perItem, body)
		if err != nil {
			return nil, err
		}
		f.deletes = &dp
	}
	timeout, maxBytes := cmp.Or(cfg.ProgramTimeout, ProgramTimeoutDefault), cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	f.upsert.timeout, f.upsert.maxBytes = timeout, maxBytes
	if f.deletes != nil {
		f.deletes.timeout, f.deletes.maxBytes = timeout, maxBytes
	}
	if cfg.Accepted != "" {
		if f.accepted, err = compile("response.accepted", cfg.Accepted); err != nil {
			return nil, err
		}
	}
	if cfg.Rejected != "" {
		if f.rejected, err = compile("response.rejected", cfg.Rejected); err != nil {
			return nil, err
		}
	}
	if cfg.Refused != "" {
		if f.refused, err = compile("response.refused", cfg.Refused); err != nil {
			return nil, err
		}
	}
	if cfg.Retry != "" {
		if f.retry, err = compile("response.retry", cfg.Retry); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func newProgram(field string, r Request, perItem bool, body string) (program, error) {
	p := program{
		method: strings.ToUpper(cmp.Or(r.Method, MethodDefault)), path: r.Path,
		contentType: cmp.Or(r.ContentType, ContentTypeDefault), perItem: perItem,
		bodyField: field + ".body",
	}
	if strings.ContainsAny(p.method, " \t\r\n/") {
		return p, fmt.Errorf("%s.method: %q is not an HTTP method", field, r.Method)
	}
	if p.path != "" && !strings.HasPrefix(p.path, "/") {
		return p, fmt.Errorf("%s.path: must start with /", field)
	}
	if !perItem && (strings.Contains(p.path, "{id}") || strings.Contains(p.path, "{version}")) {
		return p, fmt.Errorf("%s.path: {id} and {version} need request.per_item: true", field)
	}
	if body != "" {
		code, err := compile(p.bodyField, body)
		if err != nil {
			return p, err
		}
		p.body = code
	}
	return p, nil
}

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
			r, err := g.p.request(b.Source, g.items, now)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, r)
			continue
		}
		for i := range g.items {
			r, err := g.p.request(b.Source, g.items[i:i+1:i+1], now)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, r)
		}
	}
	return reqs, nil
}

// request runs the body program once for items (one item when perItem).
func (p *program) request(source string, items []thirdparty.Item, now float64) (thirdparty.Request, error) {
	ids := make([]string, len(items))
	for i := range items {
		ids[i] = items[i].ID
	}
	r := thirdparty.Request{Method: p.method, Path: p.path, IDs: ids, Items: items}
	if p.perItem {
		r.Path = strings.NewReplacer("{id}", url.PathEscape(ids[0]), "{version}", strconv.FormatInt(items[0].Version, 10)).Replace(p.path)
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
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	fail := func(err error) (thirdparty.Request, error) {
		if ctx.Err() != nil {
			err = fmt.Errorf("ran past its bound of %s (program_timeout)", p.timeout)
		}
		return r, &ProgramError{Field: p.bodyField, Err: err}
	}
	iter := p.body.RunWithContext(ctx, in, now)
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

// Read reads an answer: a 2xx counts when response.accepted says true,
// minus the items response.rejected names; a 404 or 410 to a delete sent
// on its own accepts it; anything else by the common rules.
func (f *Format) Read(r *thirdparty.Request, a *thirdparty.Answer) (*thirdparty.Result, error) {
	var in map[string]any
	if f.refused != nil || f.retry != nil {
		in = answerValue(a)
		now := float64(time.Now().Unix())
		for _, c := range []struct {
			code  *gojq.Code
			field string
			as    func(string) error
		}{{f.refused, "response.refused", a.RefusesCredentials}, {f.retry, "response.retry", a.Transient}} {
			if c.code == nil {
				continue
			}
			v, err := one(c.code, in, now, c.field)
			if err != nil {
				return nil, a.NotAnAnswer(err.Error())
			}
			if b, ok := v.(bool); ok && b {
				return nil, c.as(c.field + " says so")
			} else if !ok && v != nil {
				return nil, a.NotAnAnswer(c.field + ": gives " + typeOf(v) + ", not a boolean")
			}
		}
	}
	if !a.OK() {
		if f.deletes != nil && f.deletes.perItem && len(r.Items) == 1 && r.Items[0].Deleted &&
			(a.StatusCode == http.StatusNotFound || a.StatusCode == http.StatusGone) {
			return &thirdparty.Result{}, nil
		}
		if f.deletes == nil && f.upsert.perItem && len(r.Items) == 1 && r.Items[0].Deleted &&
			(a.StatusCode == http.StatusNotFound || a.StatusCode == http.StatusGone) {
			return &thirdparty.Result{}, nil
		}
		return nil, a.Refusal()
	}
	if f.accepted == nil && f.rejected == nil {
		return &thirdparty.Result{}, nil
	}
	if in == nil {
		in = answerValue(a)
	}
	now := float64(time.Now().Unix()) // an answer's reading is not recorded
	if f.accepted != nil {
		v, err := one(f.accepted, in, now, "response.accepted")
		if err != nil {
			return nil, a.NotAnAnswer(err.Error())
		}
		ok, isBool := v.(bool)
		if !isBool {
			return nil, a.NotAnAnswer("response.accepted: gives " + typeOf(v) + ", not a boolean")
		}
		if !ok {
			return nil, a.NotAnAnswer("response.accepted: says the answer does not accept the request")
		}
	}
	res := &thirdparty.Result{}
	if f.rejected == nil {
		return res, nil
	}
	v, err := one(f.rejected, in, now, "response.rejected")
	if err != nil {
		return nil, a.NotAnAnswer(err.Error())
	}
	if v == nil {
		return res, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, a.NotAnAnswer("response.rejected: gives " + typeOf(v) + ", not a list")
	}
	held := make(map[string]bool, len(r.IDs))
	for _, id := range r.IDs {
		held[id] = false
	}
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, a.NotAnAnswer(fmt.Sprintf("response.rejected: entry %d is %s, not an object", i, typeOf(e)))
		}
		id, ok := idText(m["id"])
		if !ok {
			return nil, a.NotAnAnswer(fmt.Sprintf("response.rejected: entry %d has no id", i))
		}
		named, in := held[id]
		if !in {
			return nil, a.NotAnAnswer(fmt.Sprintf("response.rejected: entry %d names id %q, not in the request", i, a.Safe(id)))
		}
		if named {
			continue
		}
		held[id] = true
		msg := "rejected"
		switch t := m["error"].(type) {
		case nil:
		case string:
			msg = cmp.Or(t, msg)
		default:
			j, _ := gojq.Marshal(t)
			msg = string(j)
		}
		res.Rejected = append(res.Rejected, thirdparty.Rejection{ID: id, Error: a.Safe(msg)})
	}
	return res, nil
}

// one runs code on in and returns its one output.
// answerValue is an answer as the response programs see it.
func answerValue(a *thirdparty.Answer) map[string]any {
	in := map[string]any{"status": a.StatusCode, "headers": headerValue(a.Header), "body": nil}
	if body := bytes.TrimSpace(a.Body); len(body) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) == nil && !dec.More() {
			in["body"] = v
		}
	}
	return in
}

func one(code *gojq.Code, in any, now float64, field string) (any, error) {
	iter := code.RunWithContext(context.Background(), in, now)
	v, ok := iter.Next()
	if !ok {
		return nil, fmt.Errorf("%s: gives no output", field)
	}
	if err, ok := v.(error); ok {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}

// idText reads an id a program gave: a string, or an integer compared by
// its text.
func idText(v any) (string, bool) {
	switch t := v.(type) {
	case string:
		return t, t != ""
	case int:
		return strconv.Itoa(t), true
	case float64:
		if t == float64(int64(t)) {
			return strconv.FormatInt(int64(t), 10), true
		}
	case json.Number:
		return t.String(), true
	}
	if b, err := gojq.Marshal(v); err == nil && len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return string(b), true
	}
	return "", false
}

func typeOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return "a number"
}

// headerValue is an answer's header as the programs see it: lower-case
// names, values joined by ", ".
func headerValue(h http.Header) map[string]any {
	m := make(map[string]any, len(h))
	for k, vs := range h {
		m[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return m
}
