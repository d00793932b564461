package gpumodel

import (
	"testing"
)

// TestGPULossLater queues three micro-batches back to back (the third
// reuses the first upload slot, so its upload waits for the first's copy),
// each with LossLater and no host wait between them, and checks every
// pending loss against Loss after a synchronous forward pass of the same
// micro-batch alone: the same value to the last bit (the tokens went up
// intact and the losses came back from the right pass). A second Value is
// refused.
func TestGPULossLater(t *testing.T) {
	const batch, seq = 2, 32
	r := newRig(t, testShape, 1e-3, recipes[0].r)
	m := r.model(t, testShape, batch, seq, Options{})
	var toks, tgts [][]int32
	var pend []*PendingLoss
	for i := range 3 {
		tok := randomTokens(batch*seq, testShape.Vocab, uint64(10+i))
		tg := randomTokens(batch*seq, testShape.Vocab, uint64(20+i))
		toks, tgts = append(toks, tok), append(tgts, tg)
		if err := m.Forward(r.o.Param, tok, tg, 0); err != nil {
			t.Fatal(err)
		}
		p, err := m.LossLater()
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, p)
	}
	got := make([]float64, len(pend))
	for i, p := range pend {
		var err error
		if got[i], err = p.Value(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pend[0].Value(); err == nil {
		t.Error("a second Value was not refused")
	}
	for i := range pend {
		if err := m.Forward(r.o.Param, toks[i], tgts[i], 0); err != nil {
			t.Fatal(err)
		}
		want, err := m.Loss()
		if err != nil {
			t.Fatal(err)
		}
		if got[i] != want {
			t.Errorf("micro-batch %d: LossLater's value %v, Loss after the same pass alone %v", i, got[i], want)
		}
	}
	if got[0] == got[1] || got[1] == got[2] {
		t.Errorf("different micro-batches gave equal losses %v: the test shows nothing", got)
	}
}
