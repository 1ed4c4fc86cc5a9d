package fakethirdparty

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// scanValid reports whether the scanner accepts data as exactly one JSON
// value, the question json.Valid answers.
func scanValid(data []byte) bool {
	s := &scanner{data: data}
	if _, err := s.value(0); err != nil {
		return false
	}
	s.ws()
	return s.pos == len(data)
}

var scanCorpus = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e10`, `1E-2`, `-1.0`, `true`, `false`, `null`,
	`{"a":[1,2,{"b":null}],"c":"\u00e9\n\"\\\/"}`, ` { "a" : 1 } `,
	`01`, `1.`, `.5`, `-`, `1e`, `+1`, `"\x"`, `"\u12"`, `"a`, "\"\x01\"", `{"a" 1}`,
	`{"a":1,}`, `[1,]`, `[1 2]`, `tru`, `nul`, `{"a":1}}`, `{,}`, `[`, `{`, `"\ud800"`,
	`{"a":-}`, `[-01]`, `1 2`, "", " ", `{"items":[{"id":"1","version":1,"payload":{}}]}`,
}

func TestScannerMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, in := range scanCorpus {
		require.Equal(t, json.Valid([]byte(in)), scanValid([]byte(in)), "input %q", in)
	}
}

func FuzzScanner(f *testing.F) {
	for _, in := range scanCorpus {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := scanValid(data), json.Valid(data); got != want {
			t.Fatalf("scanner says %v, encoding/json says %v, for %q", got, want, data)
		}
		// scanBatch must never panic, whatever it is given.
		_, _ = scanBatch(data, nil)
		_ = topLevelKey(data, "a")
	})
}

func TestTopLevelKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string
		want    bool
	}{
		{`{"k":1}`, true},
		{`{"a":{"k":1}}`, false},
		{`{"a":"k","b":["k"]}`, false},
		{`{"\u006b":1}`, true},
		{`{"\/k":1}`, false},
		{`{"a\/b":1}`, false},
		{`["k"]`, false},
		{`"k"`, false},
		{`{"a":1,"k":null}`, true},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, hasTopLevelKey([]byte(tt.payload), "k"), tt.payload)
	}
}
