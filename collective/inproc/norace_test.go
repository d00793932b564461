//go:build !race

package inproc_test

// raceEnabled: the race detector slows memory access down about tenfold.
const raceEnabled = false
