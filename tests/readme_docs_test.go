package tests

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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

// TestDocLinks: every relative link of the README, CONTRIBUTING.md and
// docs/*.md names a file or folder of the repository.
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
			target, _, _ := strings.Cut(m[1], "#")
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(f, "../"), m[1])
			}
		}
	}
	if checked == 0 {
		t.Error("no relative links found: the pattern no longer matches the documents")
	}
}
