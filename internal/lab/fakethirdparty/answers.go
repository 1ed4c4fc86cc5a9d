package fakethirdparty

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
)

// hugeAnswerBytes is the size of a BadAnswerHuge body: past the 16 MiB a
// client reads of an answer.
const hugeAnswerBytes = 16<<20 + 1<<10

// writeBadAnswer writes the 200 of Config.BadAnswer for batch.
func writeBadAnswer(w http.ResponseWriter, kind string, batch *wireBatch) {
	first := batch.Items[0].ID.v
	var body []byte
	contentType := "application/json"
	switch kind {
	case BadAnswerHTML:
		contentType = "text/html; charset=utf-8"
		body = []byte("<!DOCTYPE html>\n<html><head><title>Welcome</title></head><body><h1>It works!</h1></body></html>\n")
	case BadAnswerMalformed:
		body = fmt.Appendf(nil, `{"results":[{"id":"%d","status":"accepted"`, first)
	case BadAnswerUnknownStatus:
		body = fmt.Appendf(nil, `{"results":[{"id":"%d","status":"queued"}]}`, first)
	case BadAnswerUnknownID:
		unknown := first
		for _, it := range batch.Items {
			unknown = max(unknown, it.ID.v)
		}
		unknown++ // wraps only past MaxInt64, to an id as unlikely
		for slices.ContainsFunc(batch.Items, func(it wireItem) bool { return it.ID.v == unknown }) {
			unknown++
		}
		body = fmt.Appendf(nil, `{"results":[{"id":"%d","status":"accepted"}]}`, unknown)
	case BadAnswerHuge:
		// Valid JSON, results empty: only its size is wrong. Written in
		// pieces so the fake does not hold 16 MiB per request.
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Content-Length", strconv.Itoa(hugeAnswerBytes))
		w.WriteHeader(http.StatusOK)
		const head, tail = `{"results":[],"padding":"`, `"}`
		_, _ = io.WriteString(w, head)
		chunk := bytes.Repeat([]byte{'x'}, 64<<10)
		for left := hugeAnswerBytes - len(head) - len(tail); left > 0; left -= len(chunk) {
			if _, err := w.Write(chunk[:min(left, len(chunk))]); err != nil {
				return // the client stopped reading, as it should
			}
		}
		_, _ = io.WriteString(w, tail)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

var emptyResults = []byte(`{"results":[]}`)

// resultsBody lists only rejected items: the contract makes a missing item
// accepted, and listing 500 acceptances would cost both sides for nothing.
func resultsBody(batch *wireBatch, rejected []int, field string) []byte {
	if len(rejected) == 0 {
		return emptyResults
	}
	type result struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Error  string `json:"error"`
	}
	out := struct {
		Results []result `json:"results"`
	}{Results: make([]result, len(rejected))}
	msg := fmt.Sprintf("field %s is not allowed", field)
	for i, idx := range rejected {
		out.Results[i] = result{ID: batch.Items[idx].ID.text, Status: "rejected", Error: msg}
		if out.Results[i].ID == "" {
			out.Results[i].ID = strconv.FormatInt(batch.Items[idx].ID.v, 10)
		}
	}
	b, _ := json.Marshal(out)
	return b
}

func errorBody(msg string) []byte {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	return b
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
