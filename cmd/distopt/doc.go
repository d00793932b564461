// Command distopt is the command-line tool of distopt.
//
// Usage:
//
//	distopt COMMAND [ARGUMENTS]
//
// Commands:
//
//	run      start the ranks of a job on this host, torchrun style
//	plan     the memory of every buffer per rank, and the comparison with other configurations
//	export   write a checkpoint's model as Hugging Face safetensors
//	version  the version of distopt and how it was built
//
// "distopt help", "--help" and "-h" print the commands and exit 0.
// "distopt help COMMAND" prints the flags of COMMAND.
//
// # distopt run
//
//	distopt run --nproc-per-node N [--nnodes M --node-rank K]
//	    [--master-addr A] [--master-port P] [--run-id ID] [--group-size G]
//	    [--grace D] [-v] -- PROGRAM ARGS...
//
// run starts N copies of PROGRAM. They are the ranks K*N ... K*N+N-1 of a
// job of M*N ranks. Each gets the environment that rendezvous.FromEnv
// reads: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT and DISTOPT_RUN_ID. Each also gets torchrun's other
// variables: GROUP_RANK (K), GROUP_WORLD_SIZE (M), ROLE_RANK,
// ROLE_WORLD_SIZE, ROLE_NAME and TORCHELASTIC_RUN_ID. As torchrun does,
// with N > 1 run sets OMP_NUM_THREADS to 1 unless it is set, and prints
// torchrun's notice.
//
// On one host (M = 1), the master address defaults to 127.0.0.1 and the
// port to a free one. With several hosts, run once per host with
// --node-rank 0 .. M-1. Give every host the same --nnodes, --master-addr
// and --master-port: rank 0's host, and a port free there.
//
// --group-size G asks for hierarchical sharding in groups of G consecutive
// ranks; see collective/hier. G must divide M*N, and G = N makes a group of
// each host. Every rank gets DISTOPT_GROUP_SIZE=G, which
// hier.GroupSizeFromEnv reads.
//
// torchrun's command lines work:
//
//   - every flag may be spelled with '_' for '-', as in --nproc_per_node;
//   - N may be gpu, cpu or auto, and --nnodes takes M:M;
//   - --standalone is the one-host default;
//   - --rdzv-endpoint HOST[:PORT] stands for --master-addr and
//     --master-port, with port 29400 when left out;
//   - --rdzv-id stands for --run-id;
//   - --rdzv-backend accepts c10d and static, and rank 0 always serves the
//     store.
//
// Every line a rank writes is prefixed with "[rank R] ", or with several
// hosts "[node K rank R] ". Standard output goes to standard output, and
// standard error to standard error. The launcher's own messages name node
// and rank the same way: "distopt run: node 0 rank 1 exited with status 1".
//
// SIGINT and SIGTERM are forwarded to every rank. Each rank runs in its own
// process group. Ranks still running after the grace period get SIGKILL,
// and so do all ranks at a second signal. The grace period is --grace, 10s
// by default.
//
// When a rank exits with a non-zero status, run sends SIGTERM to the other
// ranks. It sends SIGKILL to those still running after the grace period.
// It then exits with that rank's status, or 128+N for a rank killed by
// signal N. When all ranks succeed, it exits 0.
//
// No process of a rank outlives the job. Each rank runs under a small
// supervisor, distopt itself. The supervisor is a child subreaper: it
// adopts whatever the rank leaves, in its process group or out of it. When
// the rank's first process exits, the processes it left get SIGTERM, then
// SIGKILL after the grace period. When the launcher dies, SIGKILL included,
// every supervisor sees its control pipe close and kills its rank's
// processes. -v prints what the launcher and the supervisors start, signal
// and kill.
//
// Example, four ranks of the CPU example on one host:
//
//	go build -o bin/ ./cmd/distopt ./examples/train
//	bin/distopt run --nproc-per-node 4 -- bin/train
//	bin/distopt run --nproc_per_node 2 --standalone -- bin/train   # as for torchrun
//
// # distopt plan
//
//	distopt plan [-model NAME | -layers L -hidden H -ffn F -vocab V -positions P [-tied] | -params N]
//	    [-d 1,2,...] [-gpu NAME] [-moments fp32|bf16] [-grads bf16|fp32] [-recipe ...] [-bytes]
//	    [-sharded-grads] [-grad-fp8 e4m3|e5m2 [-grad-block N] [-grad-ef]] [-exact-avg]
//
// plan prints, for a model and each data-parallel size, the bytes per rank
// of every buffer the optimizer allocates, plus NCCL scratch. The buffers
// are those of optimizer.PredictMemory: FP8 parameters, gradients, master,
// moments, scales and padding.
//
// It also prints the comparison table of the configurations users run
// today:
//
//   - FP32 Adam;
//   - BF16 with an FP32 master clone;
//   - Megatron's distributed optimizer with BF16 or FP8 parameters
//     (--fp8-param-gather), and FP32 or BF16 moments (--exp-avg-dtype bf16);
//   - distopt with FP32 and with BF16 moments.
//
// The model is one of these:
//
//   - a preset, the 1.3B GPT-3 XL shape by default. -model list shows them:
//     the GPT-2 sizes, and Llama 2 and 3 with grouped-query attention and
//     SwiGLU;
//   - a GPT-like shape, from -layers, -hidden, -ffn, -vocab and -positions;
//   - -params N parameters, written as 70B, 70e9 or 70000000000.
//
// Other flags change what is planned:
//
//   - -gpu NAME, such as h100-80gb, h200, b200 or a100-80gb, marks what
//     does not fit that GPU's memory, and warns on stderr.
//   - -group G is hierarchical sharding; see collective/hier. The state is
//     sharded within groups of G ranks and replicated across them.
//   - With -exact-avg, the NCCL scratch is every bfloat16 gradient bucket
//     widened to float32, in one group. With -sharded-grads too, it is the
//     one bucket area that collective/nccl grows to the largest bucket.
//   - -grad-fp8 e4m3|e5m2 plans the FP8 gradient reduce-scatter of
//     collective/fp8grad, in blocks of -grad-block elements, 128 by
//     default. The gradient reduce-scatter then needs no NCCL scratch.
//
// -grad-fp8 adds two rows, counted as fp8grad.PredictSteps counts them over
// the optimizer's buckets:
//
//   - "fp8 gradient staging" is the wire buffers of the reduce-scatters in
//     flight. A device Comm keeps them in a pool by size. With full
//     gradient buffers all are in flight at once: 2 × (1 + 4/128) bytes per
//     element of every bucket. With -sharded-grads it is -grad-buffers
//     buffers of each bucket size.
//   - "fp8 gradient residuals", with -grad-ef, is 4 bytes per element of
//     every bucket: the whole gradient, not the shard.
//
// With -steptime h100|h200, plan prints instead the predicted time of every
// phase of the step. The prediction is package plan's alpha-beta model,
// with nodes of 8 GPUs and 400 Gb/s per GPU between nodes. It shows the
// phases flat and in groups of a node, and the communication. It shows the
// step with and without overlap, for the compute of -tokens tokens per GPU
// at -mfu of the peak. -steptime-chart draws the phases. -steptime does not
// model the FP8 reduce-scatter, and refuses -grad-fp8.
//
// -steptime calibration prints the model against the phases measured on 2x
// H200, over NVLink and with NCCL_P2P_DISABLE=1. Run `distopt plan -h` for
// every flag.
//
// # distopt export
//
//	distopt export [-dtype bf16|fp8|f32] [-format e4m3|e5m2] [-per-tensor] [-shard-size 5GB] CHECKPOINT OUTDIR
//
// export writes a checkpoint's model as Hugging Face style safetensors for
// other tools: model-00001-of-0000N.safetensors and
// model.safetensors.index.json. See checkpoint.ExportHF.
//
// With -dtype fp8, the linear layers' weights are FP8. Each 128x128 block
// has a "weight_scale_inv", DeepSeek-V3's convention. With -per-tensor, each
// weight has one "weight_scale" instead, vLLM's convention.
// quantization_config.json holds the object for the model's config.json.
//
// -as gpt2 writes examples/gpt's model as Hugging Face transformers' GPT-2.
// docs/GUIDE.md, "Checkpoints and export", describes it.
package main
