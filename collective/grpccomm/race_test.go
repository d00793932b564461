//go:build race

package grpccomm_test

const raceEnabled = true
