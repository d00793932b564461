// Package collectivetest is a conformance suite that every
// collective.Communicator backend runs.
//
// Run drives a whole group of ranks from one test. It suits in-process
// backends, and backends whose ranks a test can create in one process.
//
// RunRank runs the same checks from the view of one rank. It is for
// backends whose ranks are separate processes. Every rank calls it with the
// same seed and options. Each rank computes the inputs of every rank and the
// expected results deterministically. It then checks its own outputs,
// element by element, against collective.Reduce.
//
// RunRankAbort and RunRankClose check the failure semantics from one rank's
// view. They leave the communicator unusable.
//
// # What is checked
//
//   - every op, every dtype and every reduction it allows, sizes 0, 1,
//     primes and about LargeBytes, out of place and in place;
//   - NaN, ±Inf, ±0, subnormals and the largest finite values in Sum, Avg
//     and Max; a NaN result may be any NaN, other results are compared bit
//     for bit;
//   - broadcast from every root, barriers, groups of several ops, several
//     groups in flight waited in reverse order, Wait called twice;
//   - guard bands around every buffer, and inputs left unchanged;
//   - invalid ops fail at once with collective.ErrInvalid or
//     collective.ErrMemoryKind and take no place in the op sequence;
//   - a rank that never starts an op: the others' Wait returns by its
//     deadline with an error matching ctx.Err() or collective.ErrAborted,
//     and every later op on every rank fails promptly with a
//     *collective.RankError matching collective.ErrAborted;
//   - Close on one rank: the others' ops in flight fail promptly with a
//     *collective.RankError naming it, and its own later ops with
//     collective.ErrClosed.
//
// Buffers come from Options hooks, so device-memory backends run the same
// suite. By default they are buffer.HostBuffer values.
package collectivetest
