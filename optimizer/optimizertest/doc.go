// Package optimizertest is the test harness of the optimizer's tests.
//
// The tests of its backends (optimizer/gpu), of its communicators and of its
// checkpoints (optimizer/checkpoint) use it too. It is for tests only.
//
// # What it provides
//
//   - AwkwardParams, Groups and Configs: a model with awkward sizes (primes,
//     one element, a scalar, a matrix larger than a bucket, high-precision
//     parameters) and one configuration per FP8 recipe, moment type, update
//     rule and loss scaler;
//   - InitWeights and NormalWeights: deterministic initial values;
//   - Grad, RankGrad, MeanGrad, Mean and Round: deterministic gradients of
//     small multiples of powers of two, and the reference all-reduce average
//     of the ranks' gradients rounded to the gradient type as a communicator
//     rounds it (collective.Reduce);
//   - Train, Run and Collect: train one rank, or a group of in-process ranks
//     on the CPU backend, and read back every piece of optimizer state,
//     every FP8 tensor, every high-precision weight and every step result;
//   - StartRanks, WriteResult and ReadResult: re-execute the test binary
//     once per rank with the environment a launcher sets, and pass the
//     ranks' results back to the test;
//   - Diff, SameTensor and FirstDiff: bitwise comparison of the results.
//
// Every function is deterministic: the same arguments give the same bits.
package optimizertest
