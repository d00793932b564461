package collective_test

import (
	"context"
	"slices"
	"testing"

	"github.com/distopt/distopt/buffer"
	"github.com/distopt/distopt/collective"
	"github.com/distopt/distopt/collective/inproc"
)

// startLog is a communicator that records its Start calls (the size of
// each group) and, when starter is set, its StartEach calls.
type startLog struct {
	collective.Communicator
	starts []int
	each   int
}

func (s *startLog) Start(ops ...collective.Op) collective.Work {
	s.starts = append(s.starts, len(ops))
	return s.Communicator.Start(ops...)
}

type groupStarter struct{ *startLog }

func (g groupStarter) StartEach(groups ...[]collective.Op) []collective.Work {
	g.each++
	ws := make([]collective.Work, len(groups))
	for i, ops := range groups {
		ws[i] = g.Communicator.Start(ops...)
	}
	return ws
}

// TestStartEach checks collective.StartEach: one StartEach call on a
// GroupStarter, one Start per group, in order, on other communicators;
// either way one Work per group whose Wait completes its own group.
func TestStartEach(t *testing.T) {
	src := buffer.HostBuffer([]byte{1, 2, 3, 4})
	groups := func() ([][]collective.Op, []buffer.HostBuffer) {
		var gs [][]collective.Op
		var dsts []buffer.HostBuffer
		for n := range 3 {
			dst := make(buffer.HostBuffer, 4)
			dsts = append(dsts, dst)
			ops := []collective.Op{{Kind: collective.OpAllGather, Dst: dst, Src: src}}
			for range n { // groups of 1, 2 and 3 ops
				ops = append(ops, collective.Op{Kind: collective.OpAllGather, Dst: make(buffer.HostBuffer, 4), Src: src})
			}
			gs = append(gs, ops)
		}
		return gs, dsts
	}
	for _, starter := range []bool{false, true} {
		log := &startLog{Communicator: inproc.New(1)[0]}
		var c collective.Communicator = log
		if starter {
			c = groupStarter{log}
		}
		gs, dsts := groups()
		ws := collective.StartEach(c, gs...)
		if len(ws) != 3 {
			t.Fatalf("starter %t: %d works for 3 groups", starter, len(ws))
		}
		for i, w := range ws {
			if err := w.Wait(context.Background()); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(dsts[i], src) {
				t.Errorf("starter %t: group %d's destination %v, want %v", starter, i, dsts[i], src)
			}
		}
		wantStarts, wantEach := []int{1, 2, 3}, 0
		if starter {
			wantStarts, wantEach = nil, 1
		}
		if !slices.Equal(log.starts, wantStarts) || log.each != wantEach {
			t.Errorf("starter %t: Start calls of %v ops and %d StartEach calls; want %v and %d", starter, log.starts, log.each, wantStarts, wantEach)
		}
	}
}
