package curve

import (
	"fmt"
	"math"
)

// Resume checks that the runs parts (a run stopped at some step, then its
// resumptions, in order) give the training losses of the uninterrupted
// run full bit for bit, step by step, and its validation losses wherever
// full has one. It returns the number of training losses compared.
func Resume(full Curve, parts ...Curve) (int, error) {
	var train []Point
	valid := map[int]float64{}
	for _, p := range parts {
		if len(train) > 0 && len(p.Train) > 0 && p.Train[0].Step != train[len(train)-1].Step+1 {
			return 0, fmt.Errorf("curve: %s starts at step %d, the run before it ended at %d", p.Name, p.Train[0].Step, train[len(train)-1].Step)
		}
		train = append(train, p.Train...)
		for _, v := range p.Valid {
			valid[v.Step] = v.Loss
		}
	}
	if len(train) != len(full.Train) {
		return 0, fmt.Errorf("curve: %d training losses stopped and resumed, %d uninterrupted", len(train), len(full.Train))
	}
	for i, p := range full.Train {
		if q := train[i]; q.Step != p.Step || math.Float64bits(q.Loss) != math.Float64bits(p.Loss) {
			return 0, fmt.Errorf("curve: training loss %d: step %d loss %v resumed, step %d loss %v uninterrupted", i, q.Step, q.Loss, p.Step, p.Loss)
		}
	}
	for _, p := range full.Valid {
		v, ok := valid[p.Step]
		if !ok {
			return 0, fmt.Errorf("curve: no validation loss at step %d in the resumed runs", p.Step)
		}
		if math.Float64bits(v) != math.Float64bits(p.Loss) {
			return 0, fmt.Errorf("curve: validation loss at step %d: %v resumed, %v uninterrupted", p.Step, v, p.Loss)
		}
	}
	return len(train), nil
}
