package cli

import (
	"fmt"
	"reflect"
	"time"
)

// setting names a command's setting as the user sets it, from the field's
// kong tags: "--batch-size (SYNCER_BATCH_SIZE)". Messages built from the
// tags cannot drift from the flags.
func setting(cmd any, field string) string {
	f, ok := reflect.TypeOf(cmd).Elem().FieldByName(field)
	if !ok {
		panic("cli: no field " + field)
	}
	s := "--" + f.Tag.Get("name")
	if env := f.Tag.Get("env"); env != "" {
		s += " (" + env + ")"
	}
	return s
}

// unset is the value of a setting whose default its owner applies: the
// flag is a pointer, nil when neither the flag nor its variable is set, and
// its owner's Config reads 0 as its documented default. The flag's help
// shows that default (its placeholder); the CLI does not apply it again.
func unset(p *int) int {
	if p == nil {
		return 0
	}
	return *p
}

// positive returns a usage error naming the first of fields (numbers or
// durations of cmd, or pointers to numbers, left alone when nil) that is
// not above zero.
func positive(cmd any, fields ...string) error {
	for _, name := range fields {
		if v, ok := number(cmd, name); ok && v <= 0 {
			return usagef("%s must be positive, got %s", setting(cmd, name), value(cmd, name))
		}
	}
	return nil
}

// notNegative is positive for settings where 0 means none.
func notNegative(cmd any, fields ...string) error {
	for _, name := range fields {
		if v, ok := number(cmd, name); ok && v < 0 {
			return usagef("%s must not be negative, got %s", setting(cmd, name), value(cmd, name))
		}
	}
	return nil
}

// number returns the field's value, and false for a nil pointer: a
// setting not set, whose owner applies its default.
func number(cmd any, field string) (float64, bool) {
	v := reflect.ValueOf(cmd).Elem().FieldByName(field)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int()), true
	case reflect.Float32, reflect.Float64:
		return v.Float(), true
	}
	panic(fmt.Sprintf("cli: field %s is not a number", field))
}

func value(cmd any, field string) string {
	v := reflect.Indirect(reflect.ValueOf(cmd).Elem().FieldByName(field)).Interface()
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v)
}
