package nccl

import (
	"errors"
	"testing"
)

// The member checks of NewSub (CPU only; NewSub itself needs GPUs).
func TestSubRank(t *testing.T) {
	for _, tc := range []struct {
		rank, size int
		ranks      []int
		want       int // -1: ErrSubRanks
	}{
		{0, 4, []int{0, 2}, 0},
		{2, 4, []int{0, 2}, 1},
		{3, 4, []int{3, 1}, 0},
		{1, 4, []int{3, 1}, 1},
		{0, 1, []int{0}, 0},
		{0, 4, nil, -1},
		{0, 4, []int{1, 2}, -1},
		{0, 4, []int{0, 0}, -1},
		{0, 4, []int{0, 4}, -1},
		{0, 4, []int{-1, 0}, -1},
	} {
		got, err := subRank(tc.rank, tc.size, tc.ranks)
		if tc.want < 0 && !errors.Is(err, ErrSubRanks) || tc.want >= 0 && (err != nil || got != tc.want) {
			t.Errorf("subRank(%d, %d, %v) = %d, %v; want %d", tc.rank, tc.size, tc.ranks, got, err, tc.want)
		}
	}
	if a, b := membersTag([]int{0, 1, 2}), membersTag([]int{0, 12}); a != "0.1.2" || b == a {
		t.Errorf("tags %q %q", a, b)
	}
	long := make([]int, 100)
	for i := range long {
		long[i] = i
	}
	if tag := membersTag(long); len(tag) > 64 || tag == membersTag(long[1:]) {
		t.Errorf("long tag %q", tag)
	}
}
