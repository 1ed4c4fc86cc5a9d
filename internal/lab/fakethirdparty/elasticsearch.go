package fakethirdparty

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/syncer-dev/syncer/internal/thirdparty"
)

// decodeBulk reads an Elasticsearch bulk body with external versions.
// Payload lines are not copied: they are views into body, which outlives
// the request's processing.
func decodeBulk(_ *Server, _ Config, r *http.Request, body []byte) ([]thirdparty.Item, error) {
	if !strings.HasSuffix(r.URL.Path, "/_bulk") {
		return nil, errNotFound
	}
	if len(body) > 0 && body[len(body)-1] != '\n' {
		return nil, errors.New("the bulk request must be terminated by a newline [\\n]")
	}
	items := make([]thirdparty.Item, 0, bytes.Count(body, []byte{'\n'})/2+1)
	next := func() ([]byte, bool) {
		i := bytes.IndexByte(body, '\n')
		if i < 0 {
			return nil, false
		}
		line := body[:i]
		body = body[i+1:]
		return line, true
	}
	for {
		line, ok := next()
		if !ok {
			return items, nil
		}
		it, ok := fastAction(line)
		if !ok {
			var err error
			if it, err = slowAction(line, len(items)); err != nil {
				return nil, err
			}
		}
		if !it.Deleted {
			doc, ok := next()
			if !ok {
				return nil, fmt.Errorf("action %d: index without its document", len(items))
			}
			it.Payload = doc
		}
		items = append(items, it)
	}
}

// fastAction reads an action line as syncer writes it, without
// reflection: {"index":{"_id":"42","version":3,"version_type":"external"}}.
// Anything else is left to slowAction.
func fastAction(line []byte) (thirdparty.Item, bool) {
	var it thirdparty.Item
	rest, ok := bytes.CutPrefix(line, []byte(`{"index":{"_id":"`))
	if !ok {
		if rest, ok = bytes.CutPrefix(line, []byte(`{"delete":{"_id":"`)); !ok {
			return it, false
		}
		it.Deleted = true
	}
	end := bytes.IndexByte(rest, '"')
	if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
		return it, false
	}
	it.ID = string(rest[:end])
	rest, ok = bytes.CutPrefix(rest[end+1:], []byte(`,"version":`))
	if !ok {
		return it, false
	}
	digits := 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		digits++
	}
	v, err := strconv.ParseInt(string(rest[:digits]), 10, 64)
	if err != nil || !bytes.Equal(rest[digits:], []byte(`,"version_type":"external"}}`)) {
		return it, false
	}
	it.Version = v
	return it, true
}

// slowAction reads any other action line as JSON.
func slowAction(line []byte, n int) (thirdparty.Item, error) {
	var action map[string]struct {
		ID          *string `json:"_id"`
		Version     int64   `json:"version"`
		VersionType string  `json:"version_type"`
	}
	if err := strictJSON(line, &action); err != nil || len(action) != 1 {
		return thirdparty.Item{}, fmt.Errorf("malformed action/metadata line [%d]", n+1)
	}
	for kind, a := range action {
		if a.ID == nil || a.VersionType != "external" {
			return thirdparty.Item{}, fmt.Errorf("action %d: _id and version_type external are required", n)
		}
		switch kind {
		case "delete":
			return thirdparty.Item{ID: *a.ID, Version: a.Version, Deleted: true}, nil
		case "index":
			return thirdparty.Item{ID: *a.ID, Version: a.Version}, nil
		}
		return thirdparty.Item{}, fmt.Errorf("action %d: unknown action %q", n, kind)
	}
	return thirdparty.Item{}, nil
}

// bulkAnswer is Elasticsearch's bulk answer, an entry per action in
// order, written by hand: the fake shares its machine with the daemon it
// measures.
func bulkAnswer(items []thirdparty.Item, verdicts []itemVerdict, _ Config) (int, []byte) {
	var b bytes.Buffer
	b.Grow(64 + 110*len(items))
	anyError := false
	for _, v := range verdicts {
		anyError = anyError || (v.status != http.StatusOK && v.status != http.StatusCreated && v.status != http.StatusNotFound)
	}
	b.WriteString(`{"took":0,"errors":` + strconv.FormatBool(anyError) + `,"items":[`)
	var num [20]byte
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		v := verdicts[i]
		if it.Deleted {
			b.WriteString(`{"delete":{"_index":"fake","_id":`)
		} else {
			b.WriteString(`{"index":{"_index":"fake","_id":`)
		}
		id, _ := json.Marshal(it.ID) // a string always marshals
		b.Write(id)
		switch v.status {
		case http.StatusOK, http.StatusCreated, http.StatusNotFound:
			b.WriteString(`,"_version":`)
			b.Write(strconv.AppendInt(num[:0], it.Version, 10))
			switch {
			case v.status == http.StatusNotFound:
				b.WriteString(`,"result":"not_found"`)
			case it.Deleted:
				b.WriteString(`,"result":"deleted"`)
			default:
				b.WriteString(`,"result":"created"`)
			}
		default:
			reason, _ := json.Marshal(v.reason)
			b.WriteString(`,"error":{"type":"` + errorType(v.status) + `","reason":`)
			b.Write(reason)
			b.WriteByte('}')
		}
		b.WriteString(`,"status":`)
		b.Write(strconv.AppendInt(num[:0], int64(v.status), 10))
		b.WriteString(`}}`)
	}
	b.WriteString(`]}`)
	return http.StatusOK, b.Bytes()
}

func errorType(status int) string {
	switch status {
	case http.StatusConflict:
		return "version_conflict_engine_exception"
	case http.StatusTooManyRequests:
		return "es_rejected_execution_exception"
	case http.StatusServiceUnavailable:
		return "unavailable_shards_exception"
	}
	return "mapper_parsing_exception"
}
