package rendezvous

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostGroup is one name of a generated hostlist: a prefix, bracketed
// segments each of ranges of numbers of one width, and a suffix.
type hostGroup struct {
	prefix, suffix string
	segs           [][][3]int // per segment: ranges {lo, hi, width}
	mids           []string   // text after each segment
}

// String writes g in Slurm's syntax.
func (g hostGroup) String() string {
	var b strings.Builder
	b.WriteString(g.prefix)
	for i, seg := range g.segs {
		var rs []string
		for _, r := range seg {
			if r[0] == r[1] {
				rs = append(rs, fmt.Sprintf("%0*d", r[2], r[0]))
			} else {
				rs = append(rs, fmt.Sprintf("%0*d-%0*d", r[2], r[0], r[2], r[1]))
			}
		}
		fmt.Fprintf(&b, "[%s]%s", strings.Join(rs, ","), g.mids[i])
	}
	return b.String() + g.suffix
}

// hosts lists the hosts g means, from its structure: every combination of
// one number of each segment, in order.
func (g hostGroup) hosts() []string {
	out := []string{g.prefix}
	for i, seg := range g.segs {
		var next []string
		for _, h := range out {
			for _, r := range seg {
				for n := r[0]; n <= r[1]; n++ {
					next = append(next, h+fmt.Sprintf("%0*d", r[2], n)+g.mids[i])
				}
			}
		}
		out = next
	}
	for i := range out {
		out[i] += g.suffix
	}
	return out
}

// TestExpandHostlist checks examples from Slurm's documentation and 2000
// random hostlists against the hosts their generator meant.
func TestExpandHostlist(t *testing.T) {
	for list, want := range map[string][]string{
		"gpu[01-04,07],cpu9": {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu9"},
		"node1":              {"node1"},
		"n[8-11]":            {"n8", "n9", "n10", "n11"},
		"rack[1-2]-n[1,3]":   {"rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"},
		"a[009-010]b":        {"a009b", "a010b"},
	} {
		got, err := ExpandHostlist(list)
		require.NoError(t, err, list)
		assert.Equal(t, want, got, list)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var groups []string
		var want []string
		for range 1 + rng.IntN(3) {
			g := hostGroup{prefix: "h" + strings.Repeat("x", rng.IntN(2)), suffix: []string{"", "-ib", "z"}[rng.IntN(3)]}
			for range rng.IntN(3) {
				var seg [][3]int
				for range 1 + rng.IntN(3) {
					w := 1 + rng.IntN(3)
					lo := rng.IntN(20)
					seg = append(seg, [3]int{lo, lo + rng.IntN(4), w})
				}
				g.segs = append(g.segs, seg)
				g.mids = append(g.mids, []string{"", "-", "r"}[rng.IntN(3)])
			}
			groups = append(groups, g.String())
			want = append(want, g.hosts()...)
		}
		list := strings.Join(groups, ",")
		got, err := ExpandHostlist(list)
		require.NoError(t, err, list)
		require.Equal(t, want, got, list)
	}
	for _, bad := range []string{"", "n[1-", "n[3-1]", "n[a]", "n]1[", "n[1-2]]", "n[1-99999999]"} {
		_, err := ExpandHostlist(bad)
		assert.ErrorIs(t, err, ErrConfig, "%q", bad)
	}
}

// TestExpandTasksPerNode checks the repetition syntax against the lists
// written out, and refuses malformed entries.
func TestExpandTasksPerNode(t *testing.T) {
	for s, want := range map[string][]int{
		"2(x3),1": {2, 2, 2, 1},
		"4":       {4},
		"1,2,3":   {1, 2, 3},
		"8(x2)":   {8, 8},
	} {
		got, err := ExpandTasksPerNode(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, bad := range []string{"", "2(3)", "2(x0)", "0", "x", "2(x3", "2(x-1)"} {
		_, err := ExpandTasksPerNode(bad)
		assert.ErrorIs(t, err, ErrConfig, "%q", bad)
	}
}
