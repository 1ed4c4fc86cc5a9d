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
//   - Each program runs once per request, never per item of a request,
//     and every run of every program is bounded in time (program_timeout)
//     and in the bytes it allocates (bound.go): past either, a request
//     program fails as a *ProgramError and a response program's answer is
//     no answer; the run ends, holding no core.
//   - Acceptance is positive: response.accepted must say true, and a
//     program that fails, gives a value of the wrong type or names an id the
//     request did not hold makes the answer no answer (nothing is marked,
//     the request goes again), with the field and the error in the text.
package custom

import (
	"cmp"
	"errors"
	"fmt"
	"strings"

	"github.com/itchyny/gojq"
)

// Name is the format's name in configuration.
const Name = "custom"

// program is one compiled request shape.
type program struct {
	method, path, contentType string
	body                      *gojq.Code // nil: no body
	bodyField                 string
	perItem                   bool
	bounds                    bounds
	maxBytes                  int // of the body
}

// Format is the custom format. Create it with New.
type Format struct {
	upsert   program
	deletes  *program
	accepted *gojq.Code
	rejected *gojq.Code
	refused  *gojq.Code
	retry    *gojq.Code
	bounds   bounds // of every run of every program
	// tenant is what a tenant-bound copy (ForTenant) is bound to; nil for
	// a destination without tenants.
	tenant *tenantBinding
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
		gojq.WithVariables([]string{nowVar, tenantVar}),
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
	f.bounds = bounds{timeout: cmp.Or(cfg.ProgramTimeout, ProgramTimeoutDefault), maxBytes: cmp.Or(cfg.ProgramMemory, ProgramMemoryDefault)}
	maxBytes := cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	f.upsert.bounds, f.upsert.maxBytes = f.bounds, maxBytes
	if f.deletes != nil {
		f.deletes.bounds, f.deletes.maxBytes = f.bounds, maxBytes
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

// answerValue is an answer as the response programs see it.
