// Package hier implements hierarchical sharding as a
// collective.Communicator. Megatron-LM calls it
// --num-distributed-optimizer-instances, and PyTorch FSDP calls it HSDP.
//
// The d ranks of a job form d/g groups of g ranks. A group is typically the
// GPUs of one node. The optimizer state is sharded within a group and
// replicated across groups.
//
// A Comm is built from two communicators:
//
//   - group: the g ranks of this rank's group;
//   - cross: the d/g ranks that hold the same shard in every group, one per
//     group, in group order.
//
// Seen through a Comm, the job is a world of g ranks. Rank and Size are
// those of the group. Every operation acts within the group, except the
// reduce-scatter. That one reduce-scatters within the group, then
// all-reduces its result across the groups. So an optimizer made on a Comm
// is a g-rank sharded optimizer whose gradients are reduced over all d
// ranks:
//
//   - gradients: reduce-scatter inside the group, all-reduce across groups;
//   - gradient norm, non-finite flag and amax: all-reduces inside the
//     group, which holds every shard, so they are global;
//   - parameters: all-gather inside the group only.
//
// The links between groups carry the all-reduce of one gradient shard, and
// no parameters. See docs/DESIGN.md, "Note: hierarchical sharding", for the
// traffic.
//
// # Making the communicators
//
// Groups are runs of g consecutive global ranks. Rank r is rank r%g of
// group r/g. So with g ranks per node, a group is a node. The cross-group of
// rank r holds rank r%g of every group. Layout lists both.
//
//   - InProcess makes a whole world in one process.
//   - GRPC makes one process's rank from the job's rendezvous store. The
//     group and the cross-group are gRPC sub-communicators of the job, made
//     by grpccomm.NewSub.
//   - For NCCL, nccl.NewSub makes the two sub-communicators the same way.
//     Each group exchanges its NCCL unique id through the store. New joins
//     the two. On GPUs, this path has run only as two groups of one GPU;
//     see docs/MULTINODE.md.
//
// Under `distopt run --group-size G`, every rank finds G in the
// environment. GroupSizeFromEnv reads it.
//
// # Errors
//
// An error of either phase may be a *collective.RankError of the group or
// cross-group communicator. It names the rank within that communicator. It
// comes back as a RankError that names the global rank and wraps the
// original.
//
// # Memory and checkpoints
//
// A rank holds the state of a g-rank optimizer. optimizer.PredictMemory
// with world g gives its size, and so does `distopt plan -group g`.
//
// The groups are replicas, so one group writes a checkpoint. The ranks for
// which Leader is true call checkpoint.Save with their Comm. The others must
// not, or they would write the same files. The result is the checkpoint of a
// g-rank optimizer. It loads at any size, flat or in groups, since
// checkpoints reshard. Every group loads the same checkpoint.
//
// # Exactness
//
// A hierarchical reduction adds in another order than a flat one, and Avg
// divides twice. Its result is bit-identical to a flat reduce-scatter over
// the d ranks when every partial sum and quotient is exact in the
// reduction's type. Otherwise the two differ by the rounding of the partial
// sums. See docs/DESIGN.md, "Note: hierarchical sharding".
//
// # Ordering
//
// The cross-group all-reduce of a reduce-scatter starts from Wait, once its
// group phase has completed. Works of one Comm start their cross phases in
// the order the works were started. A Wait first starts the cross phases of
// every earlier work. So every rank issues the same sequence on its cross
// communicator, whatever order it waits in.
package hier
