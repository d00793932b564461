package model

// Embed sets x[b, t] = wte[tokens[b, t]] + wpe[t] for b < batch, t < seq;
// x is [batch·seq, h].
func Embed(x, wte, wpe []float64, tokens []int32, batch, seq, h int) {
	for r := range batch * seq {
		tok, pos := int(tokens[r]), r%seq
		for i := range h {
			x[r*h+i] = wte[tok*h+i] + wpe[pos*h+i]
		}
	}
}

// EmbedBackward accumulates dwte[tokens[b, t]] += dx[b, t] and
// dwpe[t] += dx[b, t].
func EmbedBackward(dwte, dwpe, dx []float64, tokens []int32, batch, seq, h int) {
	for r := range batch * seq {
		tok, pos := int(tokens[r]), r%seq
		for i := range h {
			dwte[tok*h+i] += dx[r*h+i]
			dwpe[pos*h+i] += dx[r*h+i]
		}
	}
}
