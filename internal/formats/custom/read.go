package custom

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/itchyny/gojq"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

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
			v, err := f.bounds.one(c.code, in, now, f.tenant, c.field)
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
		v, err := f.bounds.one(f.accepted, in, now, f.tenant, "response.accepted")
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
	v, err := f.bounds.one(f.rejected, in, now, f.tenant, "response.rejected")
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
