// Package cudatest holds what the GPU tests of distopt share, and those of
// programs built on its cuda package.
//
// It holds the one rule by which every GPU test decides to run, skip or
// fail. A test that finds no usable GPU skips. But when the environment
// variable DISTOPT_REQUIRE_GPU is 1, it fails. The GPU suite,
// scripts/gpu/run.sh, sets the variable. So a GPU machine that silently lost
// its GPU cannot pass.
//
// Require opens a device for a test. At the test's end it checks that
// nothing allocated through the device leaked. Stream, Event, Alloc and
// AllocHost make resources that are released when the test ends. GPUTime
// times a benchmark's GPU work by CUDA events, queued from the device's
// worker. CheckLibrary checks a package's generated kernel code without a
// GPU.
package cudatest
