package ptxgen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// PTXOnly returns the modules named in the file ptxonly of dir (one per
// line, # starts a comment): those gen.sh builds no cubin for, their
// ptxas code being measured slower than the driver's JIT. A missing file
// names none.
func PTXOnly(dir string) (map[string]bool, error) {
	b, err := os.ReadFile(dir + "/ptxonly")
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("ptxgen: %w", err)
	}
	return parsePTXOnly(b), nil
}

// parsePTXOnly reads the module names of a ptxonly file.
func parsePTXOnly(b []byte) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if name := strings.TrimSpace(line); name != "" {
			names[name] = true
		}
	}
	return names
}
