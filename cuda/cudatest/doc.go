// Package cudatest holds what the GPU tests of distopt, and of programs
// built on its cuda package, share.
//
// It holds the one rule by which every GPU test decides to run, skip or
// fail: a test that finds no usable GPU skips, unless the environment
// variable DISTOPT_REQUIRE_GPU is 1, in which case it fails. The GPU suite
// (scripts/gpu/run.sh) sets the variable, so a GPU machine that silently
// lost its GPU cannot pass. Require opens a device for a test and checks at
// its end that nothing allocated through it leaked; Stream, Event, Alloc
// and AllocHost make resources that are released when the test ends.
// CheckLibrary checks a package's generated kernel code without a GPU.
package cudatest
