package model

// Logits returns the logits of position t of sequence b of the forward
// pass (a slice of the activations: do not modify).
func (a *Activations) Logits(b, t int) []float64 {
	v := len(a.logits) / (a.batch * a.seq)
	r := b*a.seq + t
	return a.logits[r*v : (r+1)*v]
}
