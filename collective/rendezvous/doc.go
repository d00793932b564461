// Package rendezvous provides the key-value store through which the ranks
// of a multi-process job find each other.
//
// Rank 0 serves the store over gRPC at MASTER_ADDR:MASTER_PORT. Every rank,
// rank 0 too, is a client.
//
// # Configuration
//
// A Config names the rank, the number of ranks and the master's address.
// FromEnv reads it from the environment variables that torchrun and the
// distopt launcher set: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, and optionally DISTOPT_RUN_ID. Programs that do
// not use the environment build a Config field by field.
//
// Under Slurm (srun) or Open MPI (mpirun), FromEnv derives torchrun's
// variables from the launcher's. Where both are set, torchrun's win:
//
//   - the rank, world size, local rank and local world size come from
//     OMPI_COMM_WORLD_*, or from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//     and this node's entry of SLURM_TASKS_PER_NODE, or from PMIX_RANK;
//   - MASTER_ADDR is the first host of SLURM_JOB_NODELIST, expanded by
//     ExpandHostlist without scontrol, or 127.0.0.1 when every rank is on
//     this host;
//   - MASTER_PORT and the run id come from SLURM_JOB_ID or PMIX_NAMESPACE,
//     the same on every host.
//
// Set MASTER_ADDR, with mpirun -x, when ranks span hosts without a Slurm
// nodelist. docs/GUIDE.md, "Launching under Slurm and MPI", shows examples.
//
// # Joining
//
// Connect starts the server on rank 0 and joins the run on every rank. Each
// rank registers its rank and WORLD_SIZE. Connect returns once all
// WORLD_SIZE ranks have joined. It fails:
//
//   - on every rank with ErrMembership, when two ranks disagree on
//     WORLD_SIZE or two processes claim the same rank;
//   - with an error that wraps ctx.Err() and names the missing ranks, when
//     some never join;
//   - on rank 0 with ErrPortInUse, when the port is taken.
//
// Once every rank of a run has joined, its membership is fixed. Another
// Join is refused to its caller alone, and the run goes on.
//
// # Keys
//
// Keys live in the namespace of the run id, Config.RunID. So two jobs that
// reach one server never see each other's keys. Set, Get, Wait and Add are
// single round trips. Wait blocks on the server until every key it names
// exists.
//
// AllGatherValues, Barrier and CheckAgreement are built on them. They number
// their calls per key. So the same key can be used again, as long as every
// rank makes the same calls in the same order.
//
// # Security
//
// Rank 0 listens on MASTER_ADDR's address only. For a job on one host that
// is loopback, so nothing outside the host can reach the store.
//
// Every call carries a token derived from the job's secret. The secret is
// Config.Secret, from the environment variable DISTOPT_JOB_SECRET. `distopt
// run` creates a random one per job. The server refuses any call without
// the token, before reading its request. It answers with the status
// Unauthenticated and the message "unauthenticated", and nothing more. The
// secret itself is never sent.
//
// A Config without a secret is valid only on loopback. torchrun sets no
// secret, so export DISTOPT_JOB_SECRET yourself for a job on several hosts.
// The token is not encrypted. It keeps out whoever can reach the port, not
// an eavesdropper on the job's network.
//
// # Limits
//
// A call past a bound fails with ErrLimit and changes nothing. So does an
// Add whose sum leaves int64. The bounds are:
//
//   - a value of 1 MiB and a key of 4 KiB;
//   - a WORLD_SIZE of MaxWorldSize;
//   - 256 MiB and 2^20 keys held per server.
//
// Guard bounds the connections. The peers of collective/grpccomm use it as
// well:
//
//   - a connection that makes no authenticated call within
//     FirstCallTimeout, 30 s, is closed;
//   - beyond MaxPendingConns such connections, 1024, the oldest is closed;
//   - beyond MaxConns open connections, a new one is closed at once.
//
// Each closing is logged through log/slog, naming the bound.
package rendezvous
