package gpumodel

import (
	"fmt"
	"strings"
)

// nameOf returns names[v], or Type(v) (typ's name) for a value without one:
// the String of the package's named options.
func nameOf[T ~int](v T, names []string, typ string) string {
	if v < 0 || int(v) >= len(names) {
		return fmt.Sprintf("%s(%d)", typ, int(v))
	}
	return names[v]
}

// parseName returns the option whose name in names is s (any case); what
// names the option in the error.
func parseName[T ~int](s string, names []string, what string) (T, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return T(i), nil
		}
	}
	return 0, fmt.Errorf("gpumodel: %s %q: want %s", what, s, strings.Join(names, " or "))
}
