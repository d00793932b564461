//go:build race

package fp8

// raceEnabled is true when the race detector is on; the exhaustive sweeps
// then cover a sample instead of all 2^32 patterns.
const raceEnabled = true
