package model

import "math"

// CrossEntropy returns the mean over rows of -log softmax(logits[r])[target[r]]
// for logits [rows, v], and keeps the softmax in probs [rows, v]. A target
// outside [0, v) panics (the loader never gives one).
func CrossEntropy(probs, logits []float64, targets []int32, rows, v int) float64 {
	total := 0.0
	for r := range rows {
		lr, pr := logits[r*v:(r+1)*v], probs[r*v:(r+1)*v]
		mx := math.Inf(-1)
		for _, x := range lr {
			mx = max(mx, x)
		}
		sum := 0.0
		for i, x := range lr {
			pr[i] = math.Exp(x - mx)
			sum += pr[i]
		}
		for i := range pr {
			pr[i] /= sum
		}
		total += mx + math.Log(sum) - lr[targets[r]]
	}
	return total / float64(rows)
}

// CrossEntropyBackward sets dlogits = dloss·(probs - onehot(target))/rows,
// the gradient of CrossEntropy's mean scaled by dloss.
func CrossEntropyBackward(dlogits, probs []float64, targets []int32, rows, v int, dloss float64) {
	c := dloss / float64(rows)
	for r := range rows {
		for i := range v {
			dlogits[r*v+i] = c * probs[r*v+i]
		}
		dlogits[r*v+int(targets[r])] -= c
	}
}
