// Package hier implements hierarchical sharding (Megatron-LM's
// --num-distributed-optimizer-instances, PyTorch FSDP's HSDP) as a
// collective.Communicator: the d ranks of a job form d/g groups of g ranks
// (a group is typically the GPUs of one node); the optimizer state is
// sharded within a group and replicated across groups.
//
// A Comm is built from two communicators: group, the g ranks of this
// rank's group, and cross, the d/g ranks that hold the same shard in every
// group (one per group, in group order). Seen through a Comm the job is a
// world of g ranks: Rank and Size are those of the group, and every
// operation acts within the group, except the reduce-scatter, which
// reduce-scatters within the group and then all-reduces its result across
// the groups. An optimizer made on a Comm is therefore a g-rank sharded
// optimizer whose gradients are reduced over all d ranks:
//
//   - gradients: reduce-scatter inside the group, all-reduce across groups;
//   - gradient norm, non-finite flag and amax: all-reduces inside the group
//     (the group holds every shard, so they are global);
//   - parameters: all-gather inside the group only.
//
// Per rank and step, the links between groups carry the ring all-reduce of
// one shard, 2(d/g-1)/(d/g) x 1/g of the gradient bytes, and nothing of
// the parameters; in a flat d-rank ring that spans nodes, the reduce-scatter
// and the all-gather each carry (d-1)/d of their bytes over the slowest link.
//
// # Making the communicators
//
// Groups are runs of g consecutive global ranks (rank r is rank r%g of
// group r/g: with g ranks per node a group is a node), and the cross-group
// of rank r holds rank r%g of every group; Layout lists both. InProcess
// makes a whole world in one process. GRPC makes one process's rank from
// the job's rendezvous store: the group and the cross-group are gRPC
// sub-communicators of the job (grpccomm.NewSub). Under `distopt run
// --group-size G` every rank finds G in the environment (GroupSizeFromEnv).
// For NCCL, nccl.NewSub makes the two sub-communicators the same way (one
// NCCL unique id per group, exchanged through the store) and New joins
// them; that path has not yet run on GPUs.
//
// # Errors
//
// An error of either phase that names a rank (a *collective.RankError of
// the group or cross-group communicator) comes back as a RankError naming
// that rank's global rank and wrapping the original, which names the rank
// within its communicator.
//
// # Memory and checkpoints
//
// A rank holds the state of a g-rank optimizer: optimizer.PredictMemory
// with world g, or `distopt plan -group g`. The groups are replicas, so one
// group writes a checkpoint (the ranks for which Leader is true call
// checkpoint.Save with their Comm; the others must not, or they would
// write the same files): it is the checkpoint of a g-rank optimizer, which
// loads at any size, flat or in groups, since checkpoints reshard; every
// group loads the same checkpoint.
//
// # Exactness
//
// A hierarchical reduction adds in another order than a flat one (group
// partial sums first), and Avg divides twice (by g, then by d/g). Its
// result is therefore bit-identical to a flat reduce-scatter over the d
// ranks when every partial sum and quotient is exact in the reduction's
// type, for example when every gradient is a multiple of d·2^-k with few
// enough significant bits that all sums of them fit the type's mantissa
// (BF16: 8 bits). For other gradients the two differ by the rounding of
// the partial sums, as two flat reductions of NCCL with different
// algorithms (ring, tree) do. With g = 1 and two groups the reduction is
// one addition of two values and a division by 2: exact in the same way
// as the flat one for any gradients (barring underflow).
//
// # Ordering
//
// The cross-group all-reduce of a reduce-scatter is started when its group
// phase has completed, from Wait. Works of one Comm start their cross
// phases in the order the works were started (a Wait first starts the
// cross phases of every earlier work), so every rank issues the same
// sequence on its cross communicator whatever order it waits in.
package hier
