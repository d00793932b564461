// Package gomlxinterop embeds distopt in GoMLX (github.com/gomlx/gomlx)
// training programs. The model, its variables and its forward and backward
// pass stay GoMLX's. distopt owns the optimizer state, sharded over the
// data-parallel ranks. It also owns the weights the model reads, gathered in
// FP8.
//
// It is a Go module of its own, interop/gomlx/go.mod. So the core module
// never pulls GoMLX's dependencies.
//
// # The training loop
//
// The caller owns the loop. The gradient graph computes only the loss and
// the gradients (GradExec). distopt's step runs between two executions of
// it. Trainer wraps the whole cycle:
//
//	tr, err := gomlxinterop.NewTrainer(ctx, comm, backend, gctx, modelFn, lossFn, firstBatch, gomlxinterop.Config{Optimizer: cfg})
//	for step := range steps {
//	        loss, res, err := tr.Step(ctx, batch) // forward+backward, hand-over, distopt step, weights back
//	}
//
// See docs/DESIGN.md, "Note: GoMLX hand-over", for why the step cannot be a
// GoMLX optimizer, and for the layout and the GPU path.
//
// # Parameters
//
// GoMLX creates variables while it builds a graph. So the parameters exist
// only after the first graph is built: NewTrainer builds it with the first
// batch. Params maps the variables the gradient graph uses to distopt
// parameters, in the order of their gradients. A parameter is named by its
// variable's scope and name, such as "/layer_0/dense/weights".
//
// Rules decide, per variable:
//
//   - whether it is trained;
//   - whether it is gathered in high precision instead of FP8. By default
//     these are the variables of rank below 2, such as biases and the gains
//     and offsets of normalisations, and Dense biases of any rank;
//   - whether it is exempt from weight decay, with the same default;
//   - its Layout and its parameter group.
//
// Every rule can be replaced.
//
// # Layout
//
// Block scales run along the last axis of a parameter. GoMLX's Dense weights
// are [in, out], so their blocks would run along out. Layout Transposed
// gives distopt the variable with its first axis moved last, [out..., in].
// So blocks run along in, the axis the product reduces, as in Transformer
// Engine. The hand-over transposes on the fly, in the pass that converts the
// values anyway.
//
// The default rule picks Transposed for variables named "weights" of rank 2
// or more, the Dense kernels. It picks AsIs for the rest: embedding tables
// are [vocab, dim], and are read along dim already.
//
// # Hand-over
//
// On a backend with shared buffers, such as simplego, the variables' tensors
// share their memory with the backend. After each step the gathered FP8
// weights are dequantized straight into that memory (optimizer.WeightsInto,
// optimizer.WeightsIntoTransposed). The gradients are read from the
// backend's output buffers in place, and converted once into distopt's
// gradient views. Each direction is one pass over the parameters, with
// nothing staged.
//
// # On a GPU
//
// GPUTrainer, on Linux with cgo, runs the model on GoMLX's XLA backend
// through a PJRT CUDA plugin (NewXLABackend). It runs the step on distopt's
// CUDA backend, optimizer/gpu, on the same GPU. The graph, WeightGradExec,
// takes every parameter's FP8 codes and scale_inv as inputs. DecodeFP8
// decodes them exactly, and the model reads the decoded values in place of
// the variables. The graph's outputs are the gradients, in distopt's layout
// and gradient type.
//
// The inputs are PJRT views of distopt's gathered buffers, not copies. The
// graph writes the gradients as distopt's buckets, and the step reads XLA's
// outputs in place (optimizer.Config.ExternalGradients), so distopt holds no
// gradient buffer; GPUConfig.CopyGradients copies them into distopt's
// gradient views instead. The host orders
// the two sides with explicit waits. The variables keep only placeholder
// values.
//
// # Several ranks
//
// Every rank is a process with its own GPU, NCCL communicator
// (gpu.SetupFromEnv) and XLA client. XLAConfig.Devices limits the client to
// that GPU. Ranks whose parameters differ in names, shapes, layouts or rules
// are refused by both trainers with optimizer.ErrMismatch. The error names
// the first such parameter.
//
// The tests run GPUTrainer's logic on d simplego ranks over gRPC, with a host
// device in place of the GPU. They check it bit for bit against one Trainer
// fed the ranks' batches as micro-batches. What only a GPU runs has run on
// one GPU, but not yet on two.
//
// # Gradients of products
//
// GoMLX v0.26.0 differentiates DotGeneral (Dense, Einsum, attention) by
// broadcasting the output gradient against the other operand and reducing,
// not by a matrix product; on a GPU that made a 12-layer model's steps about
// ten times slower than its FLOPs. UseDotGeneralGradient replaces that
// gradient (and the matrix-matrix Dot's), process-wide, by matrix
// products, the same up to the order of
// the float sums. It is a choice of the program (the example makes it), not
// of this package's trainers.
package gomlxinterop
