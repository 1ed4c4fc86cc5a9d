package config

import (
	"bytes"
	"errors"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxSyntaxScan bounds the lines syntaxError re-parses to find where a
// file stops being YAML: a configuration is a few dozen lines, and a file
// of more is reported at the parser's own line.
const maxSyntaxScan = 2000

// parserLine is how the YAML parser prefixes its messages.
var parserLine = regexp.MustCompile(`^(yaml: )?line (\d+): `)

// syntaxError is the error for data the YAML parser refused, at the line
// that broke it. The parser names the line of the block it was inside (a
// mapping opened on line 1 for a key mis-indented on line 4), which points
// the user at the wrong place; the line that broke the file is the one
// after the longest run of leading lines that still parses.
func syntaxError(data []byte, err error) *Error {
	msg := parserLine.ReplaceAllString(err.Error(), "")
	msg = strings.TrimPrefix(msg, "yaml: ")
	lines := strings.SplitAfter(string(data), "\n")
	line := 0
	if len(lines) <= maxSyntaxScan {
		for n := len(lines) - 1; n >= 0; n-- {
			if parses(strings.Join(lines[:n], "")) {
				line = n + 1
				break
			}
		}
	}
	if line == 0 {
		// The parser's own line, when the scan could not tell.
		if m := parserLine.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[2])
		}
	}
	return &Error{Line: line, Msg: "not valid YAML: " + msg}
}

// parses reports whether text is a stream of YAML documents.
func parses(text string) bool {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(text)))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			return false
		}
	}
}
