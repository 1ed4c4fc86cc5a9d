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

// positive returns a usage error naming the first of fields (numbers or
// durations of cmd) that is not above zero.
func positive(cmd any, fields ...string) error {
	for _, name := range fields {
		if v := number(cmd, name); v <= 0 {
			return usagef("%s must be positive, got %s", setting(cmd, name), value(cmd, name))
		}
	}
	return nil
}

// notNegative is positive for settings where 0 means none.
func notNegative(cmd any, fields ...string) error {
	for _, name := range fields {
		if v := number(cmd, name); v < 0 {
			return usagef("%s must not be negative, got %s", setting(cmd, name), value(cmd, name))
		}
	}
	return nil
}

func number(cmd any, field string) float64 {
	v := reflect.ValueOf(cmd).Elem().FieldByName(field)
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(v.Int())
	case reflect.Float32, reflect.Float64:
		return v.Float()
	}
	panic(fmt.Sprintf("cli: field %s is not a number", field))
}

func value(cmd any, field string) string {
	v := reflect.ValueOf(cmd).Elem().FieldByName(field).Interface()
	if d, ok := v.(time.Duration); ok {
		return d.String()
	}
	return fmt.Sprint(v)
}
