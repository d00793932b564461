package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// maxReadmeLines is the README's length limit (issue 35): usage goes in the
// README, everything else in docs/.
const maxReadmeLines = 250

// TestReadmeLength keeps the README within maxReadmeLines lines.
func TestReadmeLength(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, want at most %d: move detail into docs/", n, maxReadmeLines)
	}
}

// TestReadmeTestCommand: the quick start's test command is one CI runs,
// word for word, so that the README promises what CI checks.
func TestReadmeTestCommand(t *testing.T) {
	ci, err := os.ReadFile("../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	block := readmeBlock(t, "## Quick start", "sh")
	var cmd string
	for line := range strings.Lines(block) {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "go test") {
			cmd = line
		}
	}
	if cmd == "" {
		t.Fatal(`the quick start's code block has no "go test" command`)
	}
	for line := range strings.Lines(string(ci)) {
		if strings.TrimSpace(line) == cmd {
			return
		}
	}
	t.Errorf("the quick start's test command %q is not a line of .ci/run", cmd)
}

// mdLink matches the target of a Markdown link or image: ](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors returns the anchors GitHub gives the headings of a Markdown
// text: lower case, spaces as hyphens, other punctuation dropped, and
// "-1", "-2", ... after a repeated one. Code blocks are skipped.
func anchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	fence := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fence || !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.TrimSpace(title) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(unicode.ToLower(r))
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocLinks: every relative link of the README, CONTRIBUTING.md and
// docs/*.md names a file or folder of the repository, and a link into a
// Markdown file names one of its headings.
func TestDocLinks(t *testing.T) {
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"../README.md", "../CONTRIBUTING.md"}, docs...)
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(text), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path := f
			if target != "" {
				path = filepath.Join(filepath.Dir(f), target)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(f, "../"), m[1])
				continue
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			dest, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !anchors(string(dest))[anchor] {
				t.Errorf("%s links to %s, but %s has no heading with that anchor", strings.TrimPrefix(f, "../"), m[1], filepath.Base(path))
			}
		}
	}
	if checked == 0 {
		t.Error("no relative links found: the pattern no longer matches the documents")
	}
}

// filePath matches a code span that names a file of the repository by its
// path: a folder, a slash and a name with a source or script extension.
var filePath = regexp.MustCompile("`([A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/[A-Za-z0-9_.-]+\\.(?:go|cu|cuh|sh|py|md))`")

// TestDocFilePaths: the files that the README, CONTRIBUTING.md and the
// guides name in code spans exist, so that a move of a file shows up here.
// BENCHMARKS.md is a dated record and may name files as they were then.
func TestDocFilePaths(t *testing.T) {
	files := []string{"../README.md", "../CONTRIBUTING.md", "../docs/GUIDE.md", "../docs/MULTINODE.md", "../docs/GPT.md", "../docs/DESIGN.md"}
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range filePath.FindAllStringSubmatch(string(text), -1) {
			checked++
			if _, err := os.Stat(filepath.Join("..", m[1])); err != nil {
				t.Errorf("%s names %s, which does not exist", strings.TrimPrefix(f, "../"), m[1])
			}
		}
	}
	if checked == 0 {
		t.Error("no file paths found: the pattern no longer matches the documents")
	}
}
