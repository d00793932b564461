// Package plan holds what memory planning needs besides
// optimizer.PredictMemory.
//
// It provides:
//
//   - named presets of model shapes: GPT-2 and GPT-3 style, and Llama style
//     with a SwiGLU FFN and grouped-query attention, tied or untied;
//   - the published bytes per parameter of the configurations users run
//     today: Megatron's distributed optimizer, with and without
//     --fp8-param-gather and BF16 moments;
//   - the memory of common GPUs;
//   - parameter counts parsed as people write them, such as "70B" or "70e9".
//
// It also models the time of a step's collectives: PredictStep, an
// alpha-beta model calibrated on H200s.
//
// `distopt plan` and examples/multigpu use it. The optimizer package does not
// know it.
package plan
