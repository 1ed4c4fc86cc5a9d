package custom

import (
	"strings"
	"time"

	"github.com/syncer-dev/syncer/internal/delivery"
	"github.com/syncer-dev/syncer/internal/formats/setting"
)

// Kind registers the custom format: its programs and their bound. The
// command line alone cannot configure it (it needs a file).
var Kind = setting.Kind{Name: Name, Fields: []string{"request", "deletes", "response", "program_timeout"}, Parse: parse}

// Build makes the format of c: Config is the custom format's settings.
func (c Config) Build(*setting.Env) (delivery.Format, error) {
	f, err := New(&c)
	if err != nil {
		return nil, &setting.FieldError{Field: fieldOf(err), Err: err}
	}
	return f, nil
}

// fieldOf is the field an error of New starts with ("request.body: ...").
func fieldOf(err error) string {
	if field, _, ok := strings.Cut(err.Error(), ":"); ok && !strings.Contains(field, " ") {
		return field
	}
	return "request"
}

// parse reads request, deletes, response and program_timeout, then
// compiles the programs once, to refuse what cannot work now rather than
// at the first batch.
func parse(f setting.Fields) (setting.Settings, error) {
	var c Config
	req, err := readRequest(f, "request", []string{"method", "path", "body", "content_type", "per_item"})
	if err != nil {
		return nil, err
	}
	if req != nil {
		c.Request = *req
	}
	if c.Deletes, err = readRequest(f, "deletes", []string{"method", "path", "body", "per_item"}); err != nil {
		return nil, err
	}
	if v, err := f.String("program_timeout"); err != nil {
		return nil, err
	} else if v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > time.Minute {
			return nil, f.Errorf("program_timeout", "must be a duration above 0 and at most 1m, such as 500ms or 2s")
		}
		c.ProgramTimeout = d
	}
	rf, err := f.Mapping("response", []string{"accepted", "rejected", "refused", "retry"})
	if err != nil {
		return nil, err
	}
	if rf != nil {
		for _, s := range []struct {
			field string
			to    *string
		}{{"refused", &c.Refused}, {"retry", &c.Retry}, {"accepted", &c.Accepted}, {"rejected", &c.Rejected}} {
			if *s.to, err = rf.String(s.field); err != nil {
				return nil, err
			}
		}
	}
	if _, err := New(&c); err != nil {
		field := fieldOf(err)
		return nil, f.Errorf(field, strings.TrimPrefix(err.Error(), field+": "))
	}
	return c, nil
}

func readRequest(f setting.Fields, field string, known []string) (*Request, error) {
	rf, err := f.Mapping(field, known)
	if err != nil || rf == nil {
		return nil, err
	}
	r := &Request{}
	for _, s := range []struct {
		field string
		to    *string
	}{{"method", &r.Method}, {"path", &r.Path}, {"body", &r.Body}, {"content_type", &r.ContentType}} {
		if *s.to, err = rf.String(s.field); err != nil {
			return nil, err
		}
	}
	if r.PerItem, _, err = rf.Bool("per_item"); err != nil {
		return nil, err
	}
	return r, nil
}
