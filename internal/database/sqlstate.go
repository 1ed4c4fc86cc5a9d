package database

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Condition is PostgreSQL's condition name of SQLSTATE code
// ("division_by_zero" for 22012), or "" for a code it does not know.
func Condition(code string) string { return conditions[code] }

// SQLState is err's SQLSTATE and its condition name, "22012
// division_by_zero", when PostgreSQL answered err; "" otherwise. It never
// holds PostgreSQL's message, which may quote a value of a row.
func SQLState(err error) string {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return ""
	}
	if name := Condition(pe.Code); name != "" {
		return pe.Code + " " + name
	}
	return pe.Code
}
