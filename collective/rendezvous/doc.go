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
// Under Slurm (srun) or Open MPI (mpirun), FromEnv derives the variables
// torchrun would set from the launcher's, torchrun's winning where both are
// set: the rank, world size, local rank and local world size from
// OMPI_COMM_WORLD_* or SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and this
// node's entry of SLURM_TASKS_PER_NODE (or PMIX_RANK); MASTER_ADDR from
// the first host of SLURM_JOB_NODELIST (ExpandHostlist, no scontrol), or
// 127.0.0.1 when every rank is on this host; MASTER_PORT from SLURM_JOB_ID
// or PMIX_NAMESPACE, the same on every host; and the run id likewise. Set
// MASTER_ADDR (mpirun -x) when ranks span hosts without a Slurm nodelist.
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
//
// # Security
//
// Rank 0 listens on MASTER_ADDR's address only: on loopback for a job on
// one host, so that nothing outside the host can reach the store at all.
// Every call carries a token derived from the job's secret (Config.Secret,
// the environment variable DISTOPT_JOB_SECRET; `distopt run` creates a
// random one per job), and the server refuses, before reading its request,
// any call without it, with the status Unauthenticated and the message
// "unauthenticated" and nothing more. The secret itself is never sent. A
// Config without a secret is valid only on loopback (torchrun sets no
// secret: export DISTOPT_JOB_SECRET yourself for a job on several hosts).
// The token is not encrypted: it keeps out whoever can reach the port, not
// an eavesdropper on the job's network.
//
// Requests are bounded (a value of 1 MiB, a key of 4 KiB, WORLD_SIZE of
// MaxWorldSize, 256 MiB and 2^20 keys held per server): a call past a bound
// fails with ErrLimit and changes nothing; so does an Add whose sum
// leaves int64. Connections are bounded too (Guard, which the peers of
// collective/grpccomm use as well): one that makes no authenticated call
// within FirstCallTimeout (30 s) is closed, more than MaxPendingConns
// (1024) such connections close the oldest, and past MaxConns open
// connections a new one is closed at once; each closing is logged through
// log/slog, naming the bound. Once every rank of a run has
// joined, its membership is fixed: another Join is refused to its caller
// alone and the run goes on.
package rendezvous
