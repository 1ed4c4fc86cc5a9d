package compose

import "testing"

// A piece that only selects runs only if the statement reads it: the
// final SELECT reads every Call, and none of the Modify pieces.
func TestStatementReadsItsCalls(t *testing.T) {
	var s Statement
	if s.SQL() != " SELECT 1" || s.Len() != 0 {
		t.Fatalf("empty statement: %q", s.SQL())
	}
	a := s.Arg(1)
	s.Modify("UPDATE t SET x = " + a)
	s.Call("SELECT f(" + s.Arg("k") + ", " + a + ")")
	s.Modify("DELETE FROM u WHERE y = " + a)
	want := "WITH p0 AS (UPDATE t SET x = $1), p1 AS (SELECT f($2, $1)), p2 AS (DELETE FROM u WHERE y = $1) SELECT 1 FROM p1"
	if got := s.SQL(); got != want {
		t.Fatalf("SQL:\n got %q\nwant %q", got, want)
	}
	if len(s.args) != 2 || s.Len() != 3 {
		t.Fatalf("%d args, %d pieces", len(s.args), s.Len())
	}
}
