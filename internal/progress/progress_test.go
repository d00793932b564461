package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBar draws a bar into a buffer and checks the description, the
// final count and the one newline that finishes it.
func TestBar(t *testing.T) {
	var b bytes.Buffer
	f := Bar(&b, "saving", true)
	for done := int64(0); done <= 4<<20; done += 1 << 20 {
		f.Report(done, 4<<20)
	}
	out := b.String()
	if !strings.Contains(out, "saving") || !strings.Contains(out, "100%") || !strings.Contains(out, "4.0 MiB") {
		t.Errorf("bar output %q", out)
	}
	if n := strings.Count(out, "\n"); n != 1 || !strings.HasSuffix(out, "\n") {
		t.Errorf("%d newlines in %q, want one at the end", n, out)
	}
	b.Reset()
	Bar(&b, "nothing", false).Report(0, 0)
	if b.Len() != 0 {
		t.Errorf("an empty total drew %q", b.String())
	}
}

// TestQuietWhenNotATerminal checks that a file and a nil file get no bar,
// and that a nil Func is safe to report to.
func TestQuietWhenNotATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if Terminal(f, "x", true) != nil || Terminal(nil, "x", true) != nil {
		t.Error("a bar for a regular file")
	}
	var none Func
	none.Report(1, 2)
}
