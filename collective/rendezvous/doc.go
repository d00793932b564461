// Package rendezvous provides the key-value store through which the ranks of
// a multi-process job find each other: rank 0 serves it over gRPC at
// MASTER_ADDR:MASTER_PORT and every rank (rank 0 too) is a client.
//
// # Configuration
//
// A Config names the rank, the number of ranks and the master's address. It
// comes from the environment variables that torchrun and the distopt
// launcher set (FromEnv: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, and optionally DISTOPT_RUN_ID), or is built
// field by field by programs that do not use the environment.
//
// # Joining
//
// Connect starts the server on rank 0 and joins the run on every rank: each
// rank registers its rank and WORLD_SIZE, and Connect returns once all
// WORLD_SIZE ranks have joined. It fails on every rank with ErrMembership
// when two ranks disagree on WORLD_SIZE or two processes claim the same
// rank, with an error wrapping ctx.Err() that names the missing ranks when
// some never join, and on rank 0 with ErrPortInUse when the port is taken.
//
// # Keys
//
// Keys live in the namespace of the run id (Config.RunID), so that two jobs
// that reach one server never see each other's keys. Set, Get, Wait and Add
// are single round trips; Wait blocks on the server until every key it
// names exists. AllGatherValues, Barrier and CheckAgreement are built on
// them; they number their calls per key, so the same key can be used again
// as long as every rank makes the same calls in the same order.
package rendezvous
