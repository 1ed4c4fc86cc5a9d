package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// mdLinkRe finds inline Markdown links: [text](target).
var mdLinkRe = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingAnchors returns the anchors GitHub makes of a Markdown file's
// headings: lower case, punctuation dropped, spaces to hyphens.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

// TestDocLinksStayInTheRepository: a clone of the repository is all a
// reader has, so every relative link in the docs must name a file of the
// repository (and a heading of it, when it names one).
func TestDocLinksStayInTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	files := []string{filepath.Join(root, "README.md"), filepath.Join(root, "deploy", "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	files = append(files, docs...)
	require.Contains(t, files, filepath.Join(root, "docs", "protocol.md"))

	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		require.NotContains(t, string(raw), "shared/CONTRACT.md", "%s names a file outside the repository", rel)
		for _, m := range mdLinkRe.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.HasPrefix(target, "https://") || strings.HasPrefix(target, "http://") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := f
			if file != "" {
				dest = filepath.Join(filepath.Dir(f), file)
				inside, err := filepath.Rel(root, dest)
				require.NoError(t, err)
				require.False(t, strings.HasPrefix(inside, ".."), "%s: link %s leaves the repository", rel, target)
				_, err = os.Stat(dest)
				require.NoError(t, err, "%s: link %s", rel, target)
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				require.True(t, headingAnchors(t, dest)[anchor], "%s: link %s: no such heading", rel, target)
			}
		}
	}
}
