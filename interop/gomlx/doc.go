// Package gomlxinterop embeds distopt in GoMLX (github.com/gomlx/gomlx)
// training programs: the model, its variables and its forward and backward
// pass stay GoMLX's; distopt owns the optimizer state, sharded over the
// data-parallel ranks, and the weights the model reads, gathered in FP8.
//
// It lives in a Go module of its own (interop/gomlx/go.mod), so that the
// core module never pulls GoMLX's dependencies.
//
// # Why the caller owns the loop
//
// GoMLX optimizers run inside the computation graph (optimizers.Interface
// adds the update to the training graph). distopt's step is a collective
// operation across ranks on its own buffers, so it cannot be one: the
// graph computes only the loss and the gradients (GradExec), and the step
// happens between two executions. Trainer wraps the whole cycle:
//
//	tr, err := gomlxinterop.NewTrainer(ctx, comm, backend, gctx, modelFn, lossFn, firstBatch, gomlxinterop.Config{Optimizer: cfg})
//	for step := range steps {
//	        loss, res, err := tr.Step(ctx, batch) // forward+backward, hand-over, distopt step, weights back
//	}
//
// # Parameters
//
// GoMLX creates variables while it builds a graph, so the parameter list
// exists only after the first graph was built (NewGradExec's Build, called
// by NewTrainer with the first batch). Params maps the variables that the
// gradient graph uses, in the order of their gradients, to distopt
// parameters named by their scope and name ("/layer_0/dense/weights").
// Rules decide, per variable, whether it is trained, whether it is gathered
// in high precision instead of FP8 (default: rank below 2, which covers
// biases and the gains and offsets of normalisations, and Dense biases of
// any rank), whether it is exempt
// from weight decay (the same default), its layout and its parameter group;
// every rule can be replaced.
//
// # Layout: which axis the block scales run along
//
// distopt views a parameter as a row-major matrix whose last axis is the
// columns: 1x128 blocks and MXFP8's 32-element blocks run along it, and
// 128x128 tiles cover 128 rows by 128 columns. A PyTorch Linear weight is
// [out, in], so its blocks run along in, the axis the matrix multiply
// reduces, as Transformer Engine quantises it. GoMLX's Dense weights are
// [in, out]: taken as they are, the blocks would run along out. Layout
// Transposed gives distopt the variable with its first axis moved last
// ([out..., in]), so blocks run along in again; the hand-over transposes
// on the fly, in the one pass that converts the values anyway. The default
// rule picks Transposed for variables named "weights" of rank 2 or more
// (Dense kernels) and AsIs for the rest (embedding tables are [vocab,
// dim] and are read along dim already). Per-tensor scaling does not care,
// and a 128x128 tile of the transpose is the transpose of a tile, so tiles
// dequantize to the same values either way (both are tested).
//
// # Hand-over without extra copies
//
// On a backend with shared buffers (simplego, the pure-Go backend) the
// variables' tensors share their memory with the backend, and after each
// step the gathered FP8 weights are dequantized straight into that memory
// (optimizer.WeightsInto / WeightsIntoTransposed). Gradients are read
// from the backend's output buffers in place and converted once into
// distopt's gradient views (BF16 or FP32). Each direction is one pass over
// the parameters, the conversion itself; nothing is staged in between.
//
// # On a GPU
//
// GPUTrainer (Linux, cgo) runs the model on GoMLX's XLA backend through a
// PJRT CUDA plugin (NewXLABackend) and the step on distopt's CUDA backend
// (optimizer/gpu), on the same GPU. The graph (WeightGradExec) takes every
// parameter's FP8 codes and scale_inv as inputs, decodes them exactly
// (DecodeFP8: go-xla cannot emit FP8 element types, so the codes are
// uint8 and a 256-entry table gives their values) and gives the model
// the decoded values in place of the variables; its outputs are the
// gradients in distopt's layout and gradient type. The inputs are PJRT
// views of distopt's gathered buffers (no copy), the gradients go device
// to device into the gradient views, and the host orders the two sides
// with explicit waits. The variables keep only placeholder values.
//
// # Several ranks
//
// Every rank is its own process with its own GPU, NCCL communicator
// (gpu.SetupFromEnv) and XLA client (NewXLABackend, XLAConfig.Devices
// limiting it to that GPU). GPUTrainer's rank without the device (how
// the variables become parameters, the comparison of the ranks'
// parameters, the graph on the gathered codes, the hand-over of the
// gradients, the step) is shared with a host device in the tests, which
// run it on d simplego ranks over gRPC and check it bit for bit against
// one Trainer fed the ranks' batches as micro-batches. What only a GPU
// runs (the PJRT views, the device copies and waits, NCCL) has run on one
// GPU; the run on two GPUs has not run yet. Ranks whose parameters differ
// (names, shapes, layouts, rules) are refused by both trainers with
// optimizer.ErrMismatch, naming the first such parameter.
package gomlxinterop
