package sources_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// aliasColumns names a column after every alias, column and variable of
// syncer's SQL on a source: the pending read (c, k, r, t, found, num, key,
// version, payload, seq, source), the snapshot (r, k, ins), the capture
// function (n, o, g, syncer_new, syncer_old, syncer_source, syncer_rows,
// deleted, armed, lease_until, tg_op) and the marks and stats (b, f, u, i,
// a, p, o, s, done, error, changed_at).
var aliasColumns = []string{
	"t", "r", "c", "k", "n", "o", "g", "b", "f", "u", "i", "a", "p", "s",
	"src", "chg", "ins", "done", "found", "num", "key", "seq", "source",
	"version", "payload", "deleted", "changed_at", "error", "armed",
	"lease_until", "syncer_new", "syncer_old", "syncer_source", "syncer_rows",
	"tg_op",
}

// aliasTable creates a table whose key is id and whose other columns are
// aliasColumns, all text.
func (b *bundle) aliasTable(t *testing.T, name, key string) {
	t.Helper()
	cols := []string{pgx.Identifier{key}.Sanitize() + " bigint PRIMARY KEY"}
	for _, c := range aliasColumns {
		if c != key {
			cols = append(cols, pgx.Identifier{c}.Sanitize()+" text")
		}
	}
	b.exec(t, `CREATE TABLE `+pgx.Identifier{name}.Sanitize()+` (`+strings.Join(cols, ", ")+`)`)
}

// Issue 24, point 1: a column named like one of syncer's aliases (t, k,
// payload...) neither replaces the whole row in its payload nor makes a
// live row look deleted, with the values NULL or not, for whole-row and
// column-list sources, keyed by a column named k or key.
func TestColumnsNamedLikeSyncersAliases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.aliasTable(t, "items", "k")
	b.aliasTable(t, "things", "key")
	listed := `[` + strings.Join(aliasColumns, ", ") + `]`
	listed = strings.Replace(listed, "key, ", "", 1)
	_, srcs := b.install(t, "  - table: items\n    key: k\n    destination: crm\n    snapshot: false\n"+
		"  - table: things\n    key: key\n    columns: "+listed+"\n    destination: crm\n    snapshot: false\n")

	for _, tbl := range []string{"items", "things"} {
		q := pgx.Identifier{tbl}.Sanitize()
		b.exec(t, `INSERT INTO `+q+` (`+keyOf(tbl)+`, t, payload, found) VALUES (1, 'hello', 'p', 'f')`)
		b.exec(t, `INSERT INTO `+q+` (`+keyOf(tbl)+`) VALUES (2)`) // every other column NULL
		b.exec(t, `INSERT INTO `+q+` (`+keyOf(tbl)+`, t) VALUES (3, 'gone')`)
		b.exec(t, `DELETE FROM `+q+` WHERE `+keyOf(tbl)+` = 3`)
		b.exec(t, `UPDATE `+q+` SET t = NULL, src = 'kk' WHERE `+keyOf(tbl)+` = 1`)
	}

	for _, name := range []string{"items", "things"} {
		rows := b.pending(t, srcs[name])
		require.Equal(t, []string{"1", "2", "3"}, keys(rows), name)
		require.False(t, rows[0].Deleted, "%s: row 1 lives", name)
		require.False(t, rows[1].Deleted, "%s: row 2 lives, its t NULL", name)
		require.True(t, rows[2].Deleted, "%s: row 3 was deleted", name)
		require.Nil(t, rows[2].Payload)
		require.JSONEq(t, aliasPayload(name, 1, map[string]string{"payload": "p", "found": "f", "src": "kk"}), string(rows[0].Payload), name)
		require.JSONEq(t, aliasPayload(name, 2, nil), string(rows[1].Payload), name)
	}
}

func keyOf(table string) string {
	if table == "items" {
		return "k"
	}
	return "key"
}

// aliasPayload is the JSON of a row of aliasTable as its source sends it:
// items the whole row (its key k included), things its configured columns
// (every alias but its key); every column NULL but those set.
func aliasPayload(table string, key int, set map[string]string) string {
	var fields []string
	for _, c := range aliasColumns {
		v := "null"
		switch {
		case c == "key" && table == "things":
			continue
		case c == keyOf(table):
			v = strconv.Itoa(key)
		case set[c] != "":
			v = strconv.Quote(set[c])
		}
		fields = append(fields, strconv.Quote(c)+": "+v)
	}
	return "{" + strings.Join(fields, ", ") + "}"
}
