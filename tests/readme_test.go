package tests

import (
	"os"
	"strings"
	"testing"
)

// exampleHeading is the heading of the README's section whose Go block is
// Example_readme.
const exampleHeading = "## The compiled example"

// readmeRegions returns the lines between "// README:begin" and
// "// README:end" in src, each region without the indentation of its
// first line and without trailing blank lines, the regions joined by a
// blank line.
func readmeRegions(src string) string {
	var regions []string
	for {
		_, rest, ok := strings.Cut(src, "// README:begin\n")
		if !ok {
			return strings.Join(regions, "\n")
		}
		body, after, _ := strings.Cut(rest, "// README:end\n")
		indent := body[:len(body)-len(strings.TrimLeft(body, "\t"))]
		var lines []string
		for _, line := range strings.SplitAfter(body, "\n") {
			lines = append(lines, strings.TrimPrefix(line, indent))
		}
		regions = append(regions, strings.TrimRight(strings.Join(lines, ""), "\t\n")+"\n")
		src = after
	}
}

// readmeBlock returns the first code block of language lang in the
// README's section under heading, failing the test when there is none.
func readmeBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("README has no %q section", heading)
	}
	_, block, ok := strings.Cut(section, "```"+lang+"\n")
	if !ok {
		t.Fatalf("no %s code block in %q", lang, heading)
	}
	block, _, _ = strings.Cut(block, "```\n")
	return block
}

// TestReadmeSnippet: the code of the README's "The compiled example" is
// the compiled and tested code of Example_readme, character for character.
func TestReadmeSnippet(t *testing.T) {
	src, err := os.ReadFile("readme_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	block := readmeBlock(t, exampleHeading, "go")
	want := readmeRegions(string(src))
	if block != want {
		t.Errorf("the README's %q block differs from the README regions of tests/readme_example_test.go; replace it with:\n%s", exampleHeading, want)
	}
}
