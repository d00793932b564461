package data

import "fmt"

// Vocab is the vocabulary size of the byte-level tokenizer.
const Vocab = 256

// Separator is the token that ends every file in a split.
const Separator = 0

// Encode returns the tokens of text: one token per byte.
func Encode(text []byte) []uint16 {
	out := make([]uint16, len(text))
	for i, b := range text {
		out[i] = uint16(b)
	}
	return out
}

// Decode returns the bytes of tokens, or an error naming the first token
// outside the vocabulary.
func Decode(tokens []uint16) ([]byte, error) {
	out := make([]byte, len(tokens))
	for i, t := range tokens {
		if t >= Vocab {
			return nil, fmt.Errorf("data: token %d at position %d is outside the vocabulary of %d", t, i, Vocab)
		}
		out[i] = byte(t)
	}
	return out, nil
}
