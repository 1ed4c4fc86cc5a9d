package custom

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/itchyny/gojq"

	"github.com/syncer-dev/syncer/internal/formats/setting"
	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// VerifyField is the destination field of a verify block: how `syncer
// verify` reads back what a destination holds when its format has no read
// API of its own (custom, standard-webhooks, cloudevents), or in place of
// the one it has.
const VerifyField = "verify"

// VerifyConfig is a destination's verify block (docs/protocol.md, "Verify
// and heal"), its programs in the jq language as the custom format's.
type VerifyConfig struct {
	// Request makes one lookup. Its Body takes {"source", "ids": [...],
	// "items": [<item as sent>]} and its one output is the body; its Path
	// may hold {source} and {ids} (the ids percent-escaped, joined by
	// commas). Method defaults to MethodDefault; Body to `{ids}`, except
	// with GET, which sends none. ContentType and PerItem are not read.
	Request Request
	// Response takes the answer as response.accepted takes it
	// ({"status", "headers", "body"}) and gives [{"id", "payload"}] of what
	// the destination holds: an id left out is absent, an entry with
	// "deleted": true is held deleted (absent), one whose payload is null
	// was named without saying what is held (unknown). Required.
	Response string
	// Compare takes {"here": <item as it would be sent>, "there":
	// <payload>} and gives true when they agree. Defaults to "": the
	// payloads equal as JSON values.
	Compare string
	// ProgramTimeout bounds one run of a program. Defaults to
	// ProgramTimeoutDefault (a custom destination's program_timeout).
	ProgramTimeout time.Duration
	// LookupSize is the most ids the read API takes in one request
	// (HubSpot's batch read takes 100): a run asks for no more, whatever
	// its own lookup size. Defaults to 0: the run's.
	LookupSize int
}

// Verify is a compiled verify block. Create it with NewVerify.
type Verify struct {
	method, path string
	body         *gojq.Code // nil: no body
	response     *gojq.Code
	compare      *gojq.Code // nil: payloads equal as JSON values
	bounds       bounds
	lookupSize   int
	// tenant binds $tenant and {tenant} for a tenant's account (ForTenant);
	// nil: $tenant is null.
	tenant *tenantBinding
}

// ForTenant returns v bound to one tenant's account, as Format.ForTenant
// binds a format: {tenant} in its path is tenant (escaped) and its
// programs see $tenant as {"id": tenant} with columns added. v is not
// changed; the copy shares its compiled programs.
func (v *Verify) ForTenant(tenant string, columns map[string]any) *Verify {
	obj := make(map[string]any, len(columns)+1)
	for k, c := range columns {
		obj[k] = c
	}
	obj[TenantID] = tenant
	c := *v
	c.tenant = &tenantBinding{id: tenant, obj: obj}
	return &c
}

// NewVerify compiles cfg's programs, or returns an error naming the field
// ("verify.response: ...").
func NewVerify(cfg *VerifyConfig) (*Verify, error) {
	v := &Verify{method: strings.ToUpper(cmp.Or(cfg.Request.Method, MethodDefault)), path: cfg.Request.Path}
	if strings.ContainsAny(v.method, " \t\r\n/") {
		return nil, fmt.Errorf("verify.request.method: %q is not an HTTP method", cfg.Request.Method)
	}
	if v.path != "" && !strings.HasPrefix(v.path, "/") {
		return nil, errors.New("verify.request.path: must start with /")
	}
	if strings.Contains(v.path, "{id}") || strings.Contains(v.path, "{version}") {
		return nil, errors.New("verify.request.path: a lookup asks for many ids: use {ids}, not {id} or {version}")
	}
	body := cfg.Request.Body
	if body == "" && v.method != http.MethodGet {
		body = "{ids}"
	}
	var err error
	if body != "" {
		if v.body, err = compile("verify.request.body", body); err != nil {
			return nil, err
		}
	}
	if cfg.Response == "" {
		return nil, errors.New(`verify.response: required: a program that gives [{"id", "payload"}] of what the answer holds`)
	}
	if v.response, err = compile("verify.response", cfg.Response); err != nil {
		return nil, err
	}
	if cfg.Compare != "" {
		if v.compare, err = compile("verify.compare", cfg.Compare); err != nil {
			return nil, err
		}
	}
	if cfg.LookupSize < 0 {
		return nil, errors.New("verify.lookup_size: must be a whole number of ids, 1 or more")
	}
	v.lookupSize = cfg.LookupSize
	v.bounds = bounds{timeout: cmp.Or(cfg.ProgramTimeout, ProgramTimeoutDefault), maxBytes: ProgramMemoryDefault}
	return v, nil
}

// LookupSize is the most ids one lookup may ask for; 0 for no bound of
// its own.
func (v *Verify) LookupSize() int { return v.lookupSize }

// ParseVerify reads a destination's verify block, or nil when it has none,
// and compiles it to refuse what cannot work now. s are the destination's
// format settings: a custom destination's program_timeout bounds the
// block's programs too. It returns the settings, not the compiled block,
// so that a destination's configuration compares as values.
func ParseVerify(f setting.Fields, s setting.Settings) (*VerifyConfig, error) {
	vf, err := f.Mapping(VerifyField, []string{"request", "response", "compare", "lookup_size"})
	if err != nil || vf == nil {
		return nil, err
	}
	cfg := &VerifyConfig{}
	if c, ok := s.(Config); ok {
		cfg.ProgramTimeout = c.ProgramTimeout
	}
	rf, err := vf.Mapping("request", []string{"method", "path", "body"})
	if err != nil {
		return nil, err
	}
	if rf != nil {
		for _, s := range []struct {
			field string
			to    *string
		}{{"method", &cfg.Request.Method}, {"path", &cfg.Request.Path}, {"body", &cfg.Request.Body}} {
			if *s.to, err = rf.String(s.field); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Response, err = vf.String("response"); err != nil {
		return nil, err
	}
	if cfg.Compare, err = vf.String("compare"); err != nil {
		return nil, err
	}
	if n, err := vf.String("lookup_size"); err != nil {
		return nil, err
	} else if n != "" {
		if cfg.LookupSize, err = strconv.Atoi(n); err != nil || cfg.LookupSize < 1 {
			return nil, f.Errorf(VerifyField+".lookup_size", "must be a whole number of ids, 1 or more")
		}
	}
	if _, err := NewVerify(cfg); err != nil {
		field := fieldOf(err)
		return nil, f.Errorf(field, strings.TrimPrefix(err.Error(), field+": "))
	}
	return cfg, nil
}

// Request makes the lookup of items (their ids, and each as the format
// would send it) of source.
func (v *Verify) Request(source string, items []thirdparty.Item) (*thirdparty.Request, error) {
	ids := make([]string, len(items))
	list := make([]any, len(items))
	for i := range items {
		ids[i] = items[i].ID
		iv, err := itemValue(&items[i])
		if err != nil {
			return nil, err
		}
		if items[i].Version == 0 {
			// The version last accepted is not known (a configured
			// source): the item says nothing of it.
			delete(iv, "version")
		}
		list[i] = iv
	}
	r := &thirdparty.Request{Method: v.method, Path: v.path, IDs: ids}
	if strings.Contains(v.path, "{source}") || strings.Contains(v.path, "{ids}") || strings.Contains(v.path, "{tenant}") {
		esc := make([]string, len(ids))
		for i, id := range ids {
			esc[i] = url.QueryEscape(id)
		}
		r.Path = strings.NewReplacer("{source}", url.PathEscape(source), "{ids}", strings.Join(esc, ","),
			"{tenant}", v.tenant.pathValue()).Replace(v.path)
	}
	if v.body == nil {
		return r, nil
	}
	idList := make([]any, len(ids))
	for i, id := range ids {
		idList[i] = id
	}
	out, err := v.bounds.one(v.body, map[string]any{"source": source, "ids": idList, "items": list}, float64(time.Now().Unix()), v.tenant, "verify.request.body")
	if err != nil {
		return nil, err
	}
	b, err := gojq.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("verify.request.body: %w", err)
	}
	if len(b) > MaxBodyBytesDefault {
		return nil, fmt.Errorf("verify.request.body: writes a body past the request's byte limit (%d bytes)", MaxBodyBytesDefault)
	}
	r.ContentType, r.Body = ContentTypeDefault, b
	return r, nil
}

// Held is what an answer says the destination holds for one id.
type Held struct {
	// Payload is what is held; nil with Deleted or Unknown.
	Payload json.RawMessage
	// Deleted is set for an entry that says it is held deleted.
	Deleted bool
	// Unknown is set for an entry named with a null payload.
	Unknown bool
}

// Answer reads a lookup's answer (status, headers, body) into what is
// held, by id. An answer the program fails on, gives anything but a list
// of objects with an id, or names an id not asked for is an error: the
// answer says nothing reliable.
func (v *Verify) Answer(status int, header http.Header, body []byte, ids []string) (map[string]Held, error) {
	in := answerValue(&thirdparty.Answer{StatusCode: status, Header: header, Body: body})
	out, err := v.bounds.one(v.response, in, float64(time.Now().Unix()), v.tenant, "verify.response")
	if err != nil {
		return nil, err
	}
	list, ok := out.([]any)
	if !ok && out != nil {
		return nil, fmt.Errorf("verify.response: gives %s, not a list", typeOf(out))
	}
	asked := make(map[string]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	held := make(map[string]Held, len(list))
	for i, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("verify.response: entry %d is %s, not an object", i, typeOf(e))
		}
		id, ok := idText(m["id"])
		if !ok {
			return nil, fmt.Errorf("verify.response: entry %d has no id", i)
		}
		if !asked[id] {
			return nil, fmt.Errorf("verify.response: entry %d names an id that was not asked for", i)
		}
		var h Held
		switch {
		case m["deleted"] == true:
			h.Deleted = true
		case m["payload"] == nil:
			h.Unknown = true
		default:
			p, err := gojq.Marshal(m["payload"])
			if err != nil {
				return nil, fmt.Errorf("verify.response: entry %d: payload: %w", i, err)
			}
			h.Payload = p
		}
		held[id] = h
	}
	return held, nil
}

// Compares reports whether the block has a compare program.
func (v *Verify) Compares() bool { return v.compare != nil }

// Agree runs the compare program on here (the item as it would be sent)
// and there (the payload held).
func (v *Verify) Agree(here *thirdparty.Item, there json.RawMessage) (bool, error) {
	hv, err := itemValue(here)
	if err != nil {
		return false, err
	}
	if here.Version == 0 {
		delete(hv, "version")
	}
	var tv any
	dec := json.NewDecoder(bytes.NewReader(there))
	dec.UseNumber()
	if err := dec.Decode(&tv); err != nil {
		return false, fmt.Errorf("verify.compare: there: %w", err)
	}
	out, err := v.bounds.one(v.compare, map[string]any{"here": hv, "there": tv}, float64(time.Now().Unix()), v.tenant, "verify.compare")
	if err != nil {
		return false, err
	}
	b, ok := out.(bool)
	if !ok {
		return false, fmt.Errorf("verify.compare: gives %s, not a boolean", typeOf(out))
	}
	return b, nil
}
