package fakethirdparty

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// A hand-written scanner for the one body shape the contract allows.
// encoding/json decodes a 150 KB batch at about 60 MB/s, which at hundreds
// of batches a second would make the fake the bottleneck of the benchmarks
// it is meant to observe. This scanner validates the same JSON grammar
// (strings, escapes, numbers, literals, nesting) but builds nothing: ids and
// versions are parsed in place and payloads are kept as views into the body.

// maxDepth bounds nesting so a hostile body cannot exhaust the stack.
const maxDepth = 512

type scanner struct {
	data []byte
	pos  int
}

func (s *scanner) errorf(format string, args ...any) error {
	return fmt.Errorf("body is not valid JSON at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *scanner) expect(c byte) error {
	s.ws()
	if s.peek() != c {
		return s.errorf("expected %q", c)
	}
	s.pos++
	return nil
}

// plain marks the bytes a string may hold as they are: not a quote, not a
// backslash, not a control character. A table lookup keeps the hot loop,
// which runs over every payload byte, to one load and one branch.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

// str scans a string and returns its raw content between the quotes, and
// whether it holds escapes.
func (s *scanner) str() ([]byte, bool, error) {
	s.ws()
	if s.peek() != '"' {
		return nil, false, s.errorf("expected a string")
	}
	data := s.data
	start := s.pos + 1
	i := start
	escaped := false
	for {
		for i < len(data) && plain[data[i]] {
			i++
		}
		if i >= len(data) {
			s.pos = i
			return nil, false, s.errorf("unterminated string")
		}
		switch data[i] {
		case '"':
			s.pos = i + 1
			return data[start:i], escaped, nil
		case '\\':
			escaped = true
			i++
			if i >= len(data) {
				s.pos = i
				return nil, false, s.errorf("unterminated string")
			}
			switch data[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if len(data)-i < 5 || !isHex(data[i+1]) || !isHex(data[i+2]) || !isHex(data[i+3]) || !isHex(data[i+4]) {
					s.pos = i
					return nil, false, s.errorf("bad \\u escape")
				}
				i += 5
			default:
				s.pos = i
				return nil, false, s.errorf("bad escape")
			}
		default:
			s.pos = i
			return nil, false, s.errorf("control character in string")
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number scans a JSON number and returns its text.
func (s *scanner) number() ([]byte, error) {
	s.ws()
	start := s.pos
	if s.peek() == '-' {
		s.pos++
	}
	switch {
	case s.peek() == '0':
		s.pos++
	case isDigit(s.peek()):
		for isDigit(s.peek()) {
			s.pos++
		}
	default:
		return nil, s.errorf("expected a number")
	}
	if s.peek() == '.' {
		s.pos++
		if !isDigit(s.peek()) {
			return nil, s.errorf("bad number")
		}
		for isDigit(s.peek()) {
			s.pos++
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.pos++
		if c := s.peek(); c == '+' || c == '-' {
			s.pos++
		}
		if !isDigit(s.peek()) {
			return nil, s.errorf("bad number")
		}
		for isDigit(s.peek()) {
			s.pos++
		}
	}
	return s.data[start:s.pos], nil
}

func (s *scanner) literal(word string) error {
	if len(s.data)-s.pos < len(word) || string(s.data[s.pos:s.pos+len(word)]) != word {
		return s.errorf("bad literal")
	}
	s.pos += len(word)
	return nil
}

// value skips one JSON value and returns its bytes.
func (s *scanner) value(depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, s.errorf("nested too deep")
	}
	s.ws()
	start := s.pos
	var err error
	switch c := s.peek(); {
	case c == '{':
		s.pos++
		err = s.members(func(_ []byte, _ bool) error {
			_, err := s.value(depth + 1)
			return err
		})
	case c == '[':
		s.pos++
		err = s.elements(func() error {
			_, err := s.value(depth + 1)
			return err
		})
	case c == '"':
		_, _, err = s.str()
	case c == 't':
		err = s.literal("true")
	case c == 'f':
		err = s.literal("false")
	case c == 'n':
		err = s.literal("null")
	default:
		_, err = s.number()
	}
	if err != nil {
		return nil, err
	}
	return s.data[start:s.pos], nil
}

// members scans the members of an object whose '{' was consumed, calling
// member with each key positioned before its value; member must consume
// the value.
func (s *scanner) members(member func(key []byte, escaped bool) error) error {
	s.ws()
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, escaped, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key, escaped); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return nil
		default:
			return s.errorf("expected ',' or '}'")
		}
	}
}

// elements scans the elements of an array whose '[' was consumed.
func (s *scanner) elements(element func() error) error {
	s.ws()
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for {
		if err := element(); err != nil {
			return err
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return nil
		default:
			return s.errorf("expected ',' or ']'")
		}
	}
}

// keyIs compares a raw key with name, decoding it only if it has escapes.
func keyIs(raw []byte, escaped bool, name string) bool {
	if !escaped {
		return string(raw) == name
	}
	// Rare: decode with encoding/json, whose escapes are JSON's, not Go's.
	var k string
	err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &k)
	return err == nil && k == name
}

// errStop ends a scan early once its answer is known.
var errStop = errors.New("stop")

// scanBatch parses {"items":[{"id":"42","version":3,"payload":...},
// {"id":"43","version":7,"deleted":true}]} into
// items, appending to dst. Unknown members are skipped, as encoding/json
// would; a repeated member counts once, the last one.
func scanBatch(data []byte, dst []wireItem) ([]wireItem, error) {
	s := &scanner{data: data}
	if err := s.expect('{'); err != nil {
		return dst, err
	}
	err := s.members(func(key []byte, escaped bool) error {
		if !keyIs(key, escaped, "items") {
			_, err := s.value(1)
			return err
		}
		s.ws()
		if s.peek() != '[' {
			return s.errorf(`"items" must be an array`)
		}
		s.pos++
		dst = dst[:0]
		return s.elements(func() error {
			s.ws()
			if s.peek() != '{' {
				return s.errorf("an item must be an object")
			}
			s.pos++
			var it wireItem
			err := s.members(func(key []byte, escaped bool) error {
				switch {
				case keyIs(key, escaped, "id"):
					s.ws()
					if s.peek() != '"' {
						return s.errorf("id must be a decimal string")
					}
					raw, escaped, err := s.str()
					if err != nil {
						return err
					}
					// A canonical decimal int64 is a row id; any other
					// string is a source's key (docs/protocol.md, Sources).
					if v, err := strconv.ParseInt(string(raw), 10, 64); err == nil && !escaped && strconv.FormatInt(v, 10) == string(raw) {
						it.ID = wireID{v: v, set: true}
						break
					}
					text := string(raw)
					if escaped {
						if err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &text); err != nil {
							return s.errorf("id is not a valid string: %v", err)
						}
					}
					if text == "" {
						return s.errorf("id must not be empty")
					}
					it.ID = wireID{text: text, set: true}
				case keyIs(key, escaped, "version"):
					s.ws()
					if s.peek() == '"' {
						return s.errorf("version must be an integer")
					}
					raw, err := s.number()
					if err != nil {
						return err
					}
					v, err := strconv.ParseInt(string(raw), 10, 64)
					if err != nil {
						return s.errorf("version must be an integer, got %s", truncate(raw))
					}
					it.Version = v
				case keyIs(key, escaped, "deleted"):
					s.ws()
					switch s.peek() {
					case 't':
						it.Deleted = true
						return s.literal("true")
					case 'f':
						it.Deleted = false
						return s.literal("false")
					}
					return s.errorf(`"deleted" must be true or false`)
				case keyIs(key, escaped, "payload"):
					raw, err := s.value(2)
					if err != nil {
						return err
					}
					it.Payload.raw = raw
				default:
					_, err := s.value(2)
					return err
				}
				return nil
			})
			if err != nil {
				return err
			}
			// A missing version stays 0 and is refused as below 1.
			dst = append(dst, it)
			return nil
		})
	})
	if err != nil {
		return dst, err
	}
	s.ws()
	if s.pos != len(s.data) {
		return dst, s.errorf("data after the batch")
	}
	return dst, nil
}

// topLevelKey reports whether payload is an object with key name at its
// top level.
func topLevelKey(payload []byte, name string) bool {
	s := &scanner{data: payload}
	s.ws()
	if s.peek() != '{' {
		return false
	}
	s.pos++
	found := false
	_ = s.members(func(key []byte, escaped bool) error {
		if keyIs(key, escaped, name) {
			found = true
			return errStop
		}
		_, err := s.value(1)
		return err
	})
	return found
}
