package plan

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// countSuffixes are the multipliers ParseCount accepts after a number.
var countSuffixes = map[byte]int64{'k': 1e3, 'm': 1e6, 'b': 1e9, 'g': 1e9, 't': 1e12}

// ParseCount reads a parameter count as people write it: an integer
// ("70000000000"), a decimal number with an exponent ("70e9", "1.3e9"), or
// a decimal number followed by K, M, B (or G) or T, thousand to trillion,
// in either case ("70B", "1.3b", "350M"). The arithmetic is exact: the
// count must be a positive whole number that fits an int64.
func ParseCount(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	if n := len(t); n > 0 {
		if m, ok := countSuffixes[t[n-1]|0x20]; ok && !strings.ContainsAny(t[:n-1], "eE") {
			mult, t = m, t[:n-1]
		}
	}
	r, ok := new(big.Rat).SetString(t)
	if !ok || t == "" || strings.ContainsAny(t, "/xXpP_") {
		return 0, fmt.Errorf("plan: parameter count %q: want a number such as 70000000000, 70e9, 70B or 1.3B", s)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	switch {
	case r.Sign() <= 0:
		return 0, fmt.Errorf("plan: parameter count %q is not positive", s)
	case !r.IsInt():
		return 0, fmt.Errorf("plan: parameter count %q is not a whole number", s)
	case r.Num().Cmp(big.NewInt(math.MaxInt64)) > 0:
		return 0, fmt.Errorf("plan: parameter count %q does not fit an int64", s)
	}
	return r.Num().Int64(), nil
}
