package shard

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func randomParams(r *rand.Rand, n int) []Param {
	ps := make([]Param, n)
	for i := range ps {
		var shape []int
		switch r.IntN(5) {
		case 0:
			shape = []int{1}
		case 1:
			shape = []int{r.IntN(300) + 1}
		case 2:
			shape = []int{r.IntN(200) + 1, r.IntN(200) + 1}
		case 3:
			shape = []int{[]int{2, 3, 5, 7, 127, 131, 8191}[r.IntN(7)]}
		default:
			shape = []int{}
		}
		ps[i] = Param{Name: fmt.Sprintf("p%d", i), Shape: shape, HighPrecision: r.IntN(3) == 0}
	}
	return ps
}

// checkLayout verifies the layout invariants by brute force, element by element.
func checkLayout(t *testing.T, l *Layout) {
	t.Helper()
	for b, bk := range l.Buckets {
		if bk.Size%(l.World*bk.Align) != 0 || bk.Size < bk.Used || bk.Size-bk.Used >= l.World*bk.Align {
			t.Fatalf("bucket %d: size %d used %d align %d world %d", b, bk.Size, bk.Used, bk.Align, l.World)
		}
		owner := make([]int, bk.Size) // 0 = unowned, else param index + 1
		prevEnd := 0
		for _, i := range bk.Params {
			pl := l.Places[i]
			if pl.Bucket != b || pl.Offset%bk.Align != 0 || pl.Offset < prevEnd || pl.Offset-prevEnd >= bk.Align {
				t.Fatalf("param %d misplaced: %+v after %d", i, pl, prevEnd)
			}
			if l.Params[i].HighPrecision != bk.HighPrecision {
				t.Fatalf("param %d of the wrong kind in bucket %d", i, b)
			}
			prevEnd = pl.Offset + pl.Len
		}
		if prevEnd != bk.Used {
			t.Fatalf("bucket %d used %d, last param ends at %d", b, bk.Used, prevEnd)
		}
		seen := make([]int, bk.Size) // how many ranks cover each element
		for r := 0; r < l.World; r++ {
			lo, hi := l.ShardRange(b, r)
			if lo%bk.Align != 0 {
				t.Fatalf("shard start %d not aligned to %d", lo, bk.Align)
			}
			for e := lo; e < hi; e++ {
				seen[e]++
			}
			for _, pc := range l.Pieces(b, r) {
				if pc.Len < 1 || pc.BucketOffset < lo || pc.BucketOffset+pc.Len > hi || pc.ShardOffset != pc.BucketOffset-lo {
					t.Fatalf("bad piece %+v for shard [%d,%d)", pc, lo, hi)
				}
				if pc.BucketOffset != l.Places[pc.Param].Offset+pc.ParamOffset {
					t.Fatalf("piece %+v does not match place %+v", pc, l.Places[pc.Param])
				}
				for e := pc.BucketOffset; e < pc.BucketOffset+pc.Len; e++ {
					if owner[e] != 0 {
						t.Fatalf("element %d of bucket %d in two pieces", e, b)
					}
					owner[e] = pc.Param + 1
				}
			}
		}
		for e, c := range seen {
			if c != 1 {
				t.Fatalf("element %d of bucket %d covered by %d shards", e, b, c)
			}
		}
		// Every parameter element is owned exactly once; everything else is padding.
		params := 0
		for _, i := range bk.Params {
			pl := l.Places[i]
			for e := pl.Offset; e < pl.Offset+pl.Len; e++ {
				if owner[e] != i+1 {
					t.Fatalf("element %d of param %d not owned by a piece of it", e, i)
				}
			}
			params += pl.Len
		}
		pad := 0
		for _, o := range owner {
			if o == 0 {
				pad++
			}
		}
		if pad != bk.Size-params {
			t.Fatalf("bucket %d: %d padding elements, want %d", b, pad, bk.Size-params)
		}
	}
	for i, p := range l.Params {
		if l.Places[i].Len != p.NumElements() {
			t.Fatalf("param %d place has %d elements, want %d", i, l.Places[i].Len, p.NumElements())
		}
	}
}

func TestLayoutProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	worlds := []int{1, 2, 3, 4, 7, 8, 16, 31, 64, 100, 257, 1024}
	for _, d := range worlds {
		for trial := range 6 {
			ps := randomParams(r, 1+r.IntN(12))
			opts := Options{BucketElements: []int{1, 100, 5000, 1 << 20}[trial%4], Align: []int{128, 32, 256}[trial%3]}
			t.Run(fmt.Sprintf("d=%d/trial=%d", d, trial), func(t *testing.T) {
				l, err := New(ps, d, opts)
				if err != nil {
					t.Fatal(err)
				}
				checkLayout(t, l)
				l2, _ := New(ps, d, opts)
				if !reflect.DeepEqual(l, l2) || l.Fingerprint() != l2.Fingerprint() {
					t.Fatal("layout is not deterministic")
				}
			})
		}
	}
}

func TestLayoutEdgeCases(t *testing.T) {
	cases := []struct {
		desc   string
		params []Param
		world  int
		opts   Options
	}{
		{"one element, huge world", []Param{{Name: "s", Shape: []int{1}}}, 1024, Options{}},
		{"world larger than param", []Param{{Name: "a", Shape: []int{3}}, {Name: "b", Shape: []int{2}, HighPrecision: true}}, 7, Options{}},
		{"param larger than bucket", []Param{{Name: "a", Shape: []int{10}}, {Name: "big", Shape: []int{1000, 3}}, {Name: "c", Shape: []int{5}}}, 3, Options{BucketElements: 64, Align: 32}},
		{"straddling boundaries", []Param{{Name: "w", Shape: []int{1009}}, {Name: "v", Shape: []int{997}}}, 4, Options{Align: 32}},
		{"scalar", []Param{{Name: "s"}}, 2, Options{}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			l, err := New(c.params, c.world, c.opts)
			if err != nil {
				t.Fatal(err)
			}
			checkLayout(t, l)
		})
	}
}

func TestLayoutErrors(t *testing.T) {
	cases := []struct {
		desc   string
		params []Param
		world  int
		want   string
	}{
		{"no params", nil, 1, "no parameters"},
		{"zero world", []Param{{Name: "a", Shape: []int{1}}}, 0, "world size 0"},
		{"zero dimension", []Param{{Name: "a", Shape: []int{3, 0}}}, 1, `"a" has shape [3 0]`},
		{"duplicate", []Param{{Name: "a", Shape: []int{1}}, {Name: "a", Shape: []int{2}}}, 1, `both named "a"`},
		{"no name", []Param{{Shape: []int{1}}}, 1, "has no name"},
		// Issue 21: products that overflow an int, or come close.
		{"2^32 x 2^32", []Param{{Name: "a", Shape: []int{1 << 32, 1 << 32}}}, 1, "more than 70368744177664 elements"},
		{"3037000500^2", []Param{{Name: "a", Shape: []int{3037000500, 3037000500}}}, 1, "more than 70368744177664 elements"},
		{"2^47", []Param{{Name: "a", Shape: []int{1 << 47}}}, 1, "more than 70368744177664 elements"},
		{"sum past the bound", []Param{{Name: "a", Shape: []int{1<<45 + 1}}, {Name: "b", Shape: []int{1 << 45}}}, 1, `parameters up to "b" hold 70368744177665 elements`},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			_, err := New(c.params, c.world, Options{})
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrInvalid mentioning %q", err, c.want)
			}
		})
	}
}

// TestElementsAgainstBig: Elements is the exact product (math/big) when it
// is at most MaxElements, and an error otherwise, for shapes near the
// bound and past the overflow of an int.
func TestElementsAgainstBig(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 1))
	limit := big.NewInt(MaxElements)
	for range 20000 {
		shape := make([]int, r.IntN(4)+1)
		for i := range shape {
			shape[i] = 1 + int(r.Int64N(1<<uint(r.IntN(40)+1)))
		}
		exact := big.NewInt(1)
		for _, d := range shape {
			exact.Mul(exact, big.NewInt(int64(d)))
		}
		n, err := Param{Name: "p", Shape: shape}.Elements()
		if fits := exact.Cmp(limit) <= 0; fits != (err == nil) || fits && int64(n) != exact.Int64() {
			t.Fatalf("shape %v: Elements = %d, %v; exact %v", shape, n, err, exact)
		}
	}
}

func TestFingerprintNamesDifference(t *testing.T) {
	base := []Param{{Name: "a", Shape: []int{4, 4}}, {Name: "b", Shape: []int{4}, HighPrecision: true}}
	l1, _ := New(base, 2, Options{})
	changes := []struct {
		desc  string
		ps    []Param
		world int
		want  string
	}{
		{"world", base, 3, "world size: 2 vs 3"},
		{"shape", []Param{{Name: "a", Shape: []int{2, 8}}, base[1]}, 2, "parameter shapes"},
		{"name", []Param{{Name: "x", Shape: []int{4, 4}}, base[1]}, 2, "parameter names"},
		{"mark", []Param{base[0], {Name: "b", Shape: []int{4}}}, 2, "high-precision marks"},
	}
	for _, c := range changes {
		t.Run(c.desc, func(t *testing.T) {
			l2, err := New(c.ps, c.world, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if l1.Fingerprint() == l2.Fingerprint() {
				t.Fatal("fingerprints agree")
			}
			got, err := DecodeFields(EncodeFields(l2.Fields()))
			if err != nil {
				t.Fatal(err)
			}
			if d := DiffFields(l1.Fields(), got); !strings.Contains(d, c.want) {
				t.Fatalf("diff %q does not mention %q", d, c.want)
			}
		})
	}
	if d := DiffFields(l1.Fields(), l1.Fields()); d != "" {
		t.Fatalf("identical layouts differ: %s", d)
	}
}
