package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/syncer-dev/syncer/internal/config"
)

// TestErrorsAtTheirLine: every refusal names the line the mistake is on,
// indentation mistakes included, never the line of the block around it.
func TestErrorsAtTheirLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file string
		want string
	}{
		{"key indented too far", `destinations:
  crm:
    url: http://x
     token_env: X
sources:
  - table: orders
    key: id
    destination: crm
`, "not valid YAML: mapping values are not allowed in this context (line 4)"},
		{"list entry field indented too little", `destinations:
  crm:
    url: http://x
sources:
  - table: orders
    key: id
   destination: crm
`, "(line 7)"},
		{"unclosed flow list", `destinations:
  crm:
    url: http://x
    token_env: [a
sources:
  - table: orders
`, "(line 4)"},
		{"multi-line string before the error", `destinations:
  crm:
    url: "http://x
      "
  bad: [
`, "(line 5)"},
		{"tab indentation", "destinations:\n  crm:\n\turl: http://x\n", "(line 3)"},
		{"field outdented out of its destination", `destinations:
  crm:
    url: http://x
  token_env: X
sources:
  - table: orders
    key: id
    destination: crm
`, "destinations.token_env: must be a mapping with url and optional "}, {"field outdented, its line", `destinations:
  crm:
    url: http://x
  token_env: X
`, "(line 4)"},
		{"entries outdented under destinations", `sources:
  - table: orders
    key: id
    destination: crm
destinations:
crm:
  url: http://x
`, `unknown field "crm" (known: destinations, sources) (line 6)`},
		{"destinations with nothing under it", `sources:
  - table: orders
    key: id
    destination: crm
destinations:
`, "destinations: required: at least one destination (line 5)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tt.file), nil)
			require.Error(t, err)
			require.True(t, config.IsConfigError(err))
			require.Contains(t, err.Error(), tt.want)
			require.Equal(t, 1, countLines(err.Error()))
		})
	}
}

func countLines(s string) int {
	n := 1
	for _, c := range s {
		if c == '\n' {
			n++
		}
	}
	return n
}
