package elasticsearch

import (
	"encoding/json"
	"errors"
	"strconv"
)

// scanAnswer reads the items of a bulk answer without reflection: a bulk
// answer holds an entry per action, and decoding it with encoding/json
// cost the daemon a fifth of its time per request in the elasticsearch
// drain. It reads what Read needs (each entry's action, _id, status and
// error) and skips every other value, validating the JSON grammar as it
// goes. Any trouble returns an error, and Read falls back to
// encoding/json, which then says what is wrong: the fast path never
// decides what an odd answer means.
func scanAnswer(data []byte) (answer, error) {
	s := &scan{b: data}
	var ans answer
	if !s.consume('{') {
		return ans, errScan
	}
	err := s.object(func(key string) error {
		if key != "items" {
			return s.skip(0)
		}
		if !s.consume('[') {
			return errScan
		}
		return s.array(func() error {
			if !s.consume('{') {
				return errScan
			}
			var entry struct {
				Index  *result `json:"index"`
				Delete *result `json:"delete"`
			}
			err := s.object(func(action string) error {
				var r *result
				switch action {
				case "index":
					entry.Index = &result{}
					r = entry.Index
				case "delete":
					entry.Delete = &result{}
					r = entry.Delete
				default:
					return s.skip(0)
				}
				if !s.consume('{') {
					return errScan
				}
				return s.object(func(field string) error {
					switch field {
					case "_id":
						id, err := s.str()
						if err != nil {
							return err
						}
						r.ID = &id
						return nil
					case "status":
						n, err := s.int()
						r.Status = n
						return err
					case "error":
						if s.peek() == 'n' {
							return s.skip(0)
						}
						if !s.consume('{') {
							return errScan
						}
						r.Error = &struct {
							Type   string `json:"type"`
							Reason string `json:"reason"`
						}{}
						return s.object(func(f string) error {
							var err error
							switch f {
							case "type":
								r.Error.Type, err = s.str()
							case "reason":
								r.Error.Reason, err = s.str()
							default:
								err = s.skip(0)
							}
							return err
						})
					}
					return s.skip(0)
				})
			})
			ans.Items = append(ans.Items, entry)
			return err
		})
	})
	if err != nil {
		return ans, err
	}
	s.ws()
	if s.i != len(s.b) {
		return ans, errScan
	}
	return ans, nil
}

var errScan = errors.New("elasticsearch: not a plain bulk answer")

// maxDepth bounds nesting so a hostile answer cannot exhaust the stack.
const maxDepth = 64

type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

func (s *scan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *scan) consume(c byte) bool {
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

// object reads the members of an object whose '{' was consumed; member
// must consume the value.
func (s *scan) object(member func(key string) error) error {
	if s.consume('}') {
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if !s.consume(':') {
			return errScan
		}
		if err := member(key); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return nil
		}
		return errScan
	}
}

// array reads the elements of an array whose '[' was consumed.
func (s *scan) array(element func() error) error {
	if s.consume(']') {
		return nil
	}
	for {
		if err := element(); err != nil {
			return err
		}
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return nil
		}
		return errScan
	}
}

// str reads a string; one with escapes is decoded by encoding/json.
func (s *scan) str() (string, error) {
	if !s.consume('"') {
		return "", errScan
	}
	start, escaped := s.i, false
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !escaped {
				return string(raw), nil
			}
			var out string
			if json.Unmarshal(s.b[start-1:s.i], &out) != nil {
				return "", errScan
			}
			return out, nil
		case c == '\\':
			escaped = true
			s.i += 2
		case c < 0x20:
			return "", errScan
		default:
			s.i++
		}
	}
	return "", errScan
}

// int reads an integer.
func (s *scan) int() (int, error) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	n, err := strconv.Atoi(string(s.b[start:s.i]))
	if err != nil {
		return 0, errScan
	}
	return n, nil
}

// skip skips one value of any kind.
func (s *scan) skip(depth int) error {
	if depth > maxDepth {
		return errScan
	}
	switch c := s.peek(); {
	case c == '{':
		s.i++
		return s.object(func(string) error { return s.skip(depth + 1) })
	case c == '[':
		s.i++
		return s.array(func() error { return s.skip(depth + 1) })
	case c == '"':
		_, err := s.str()
		return err
	case c == 't', c == 'f', c == 'n':
		for _, w := range []string{"true", "false", "null"} {
			if len(s.b)-s.i >= len(w) && string(s.b[s.i:s.i+len(w)]) == w {
				s.i += len(w)
				return nil
			}
		}
		return errScan
	case c == '-' || (c >= '0' && c <= '9'):
		start := s.i
		s.i++
		for s.i < len(s.b) && (s.b[s.i] >= '0' && s.b[s.i] <= '9' || s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E' || s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if _, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err != nil {
			return errScan
		}
		return nil
	}
	return errScan
}
