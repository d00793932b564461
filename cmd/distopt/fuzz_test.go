package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/distopt/distopt/collective/rendezvous"
)

// runFlagNames are the flags of `distopt run` that have a '_' spelling,
// with a value each: torchrun's spellings.
var runFlagNames = []string{"nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port",
	"rdzv-endpoint", "rdzv-backend", "run-id", "rdzv-id", "group-size"}

// checkRunOptions checks what parseRun promises of the options it returns
// without an error, and that configs either fails or gives one valid
// configuration per local rank.
func checkRunOptions(t *testing.T, o runOptions) {
	t.Helper()
	switch {
	case len(o.program) == 0, o.nproc < 1, o.nnodes < 1, o.nodeRank < 0, o.nodeRank >= o.nnodes, o.grace < 0,
		o.nproc*o.nnodes > rendezvous.MaxWorldSize, o.masterPort < 0, o.masterPort > 65535:
		t.Fatalf("parseRun accepted %+v", o)
	case o.groupSize > 0 && o.nproc*o.nnodes%o.groupSize != 0:
		t.Fatalf("parseRun accepted group size %d for %d ranks", o.groupSize, o.nproc*o.nnodes)
	}
	cfgs, err := o.configs()
	if err != nil {
		return
	}
	if len(cfgs) != o.nproc {
		t.Fatalf("%d configurations for %d local ranks", len(cfgs), o.nproc)
	}
	for i, c := range cfgs {
		if c.Rank != o.nodeRank*o.nproc+i || c.WorldSize != o.nproc*o.nnodes || c.LocalRank != i || c.Validate() != nil {
			t.Fatalf("configuration %d of %+v: %+v", i, o, c)
		}
	}
}

// FuzzRunArgs: any command line (arguments one per line) gives options that
// keep parseRun's promises, or an error; never a panic.
func FuzzRunArgs(f *testing.F) {
	for _, seed := range []string{
		"--nproc-per-node\n2\n--\ntrue",
		"--nproc_per_node=4\n--standalone\ntrain.py",
		"--nnodes=2:2\n--node_rank=1\n--rdzv_endpoint=host:29400\n--rdzv_backend=c10d\n--nproc-per-node=8\n--\nbin/train\n-steps\n3",
		"--nnodes\n3\n--node-rank\n2\n--master-addr\n10.0.0.1\n--master-port\n29500\n--nproc-per-node\n2\n--group-size\n3\n--\nx",
		"--nproc-per-node=cpu\n--grace=1s\n-v\n--\nx",
		"--rdzv-endpoint=[::1]:1\n--nproc-per-node=1\n--\nx",
		"--nproc-per-node=1000000000000\n--\nx",
	} {
		f.Add(seed)
	}
	// Several hosts need a secret; one host makes one up.
	os.Setenv(rendezvous.EnvSecret, "fuzz-secret")
	f.Fuzz(func(t *testing.T, cmdline string) {
		o, err := parseRun(strings.Split(cmdline, "\n"), io.Discard)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an empty error")
			}
			return
		}
		checkRunOptions(t, o)
	})
}

// FuzzRunTorchrunSpellings: each flag spelled with '_' (torchrun's) gives
// the same options, or the same error, as spelled with '-'. The input picks
// flags (a byte each, then its value up to the next '\n').
func FuzzRunTorchrunSpellings(f *testing.F) {
	f.Add([]byte("\x00auto\n\x012:2\n\x021\n\x05h:1\n\x06c10d\n\x07job"))
	f.Add([]byte("\x003\n\x09 3\n\x08x"))
	f.Add([]byte("\x00 1\n\x04 99999\n\x03::1"))
	f.Fuzz(func(t *testing.T, spec []byte) {
		var dashed, underscored []string
		for _, part := range strings.Split(string(spec), "\n") {
			if part == "" {
				continue
			}
			name := runFlagNames[int(part[0])%len(runFlagNames)]
			dashed = append(dashed, "--"+name+"="+part[1:])
			underscored = append(underscored, "--"+strings.ReplaceAll(name, "-", "_")+"="+part[1:])
		}
		dashed = append(dashed, "--", "prog")
		underscored = append(underscored, "--", "prog")
		o1, err1 := parseRun(dashed, io.Discard)
		o2, err2 := parseRun(underscored, io.Discard)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("%q: %v; %q: %v", dashed, err1, underscored, err2)
		}
		if errors.Is(err1, flag.ErrHelp) || err1 != nil {
			return
		}
		if !reflect.DeepEqual(o1, o2) {
			t.Fatalf("%q gives %+v; %q gives %+v", dashed, o1, underscored, o2)
		}
		checkRunOptions(t, o1)
	})
}
