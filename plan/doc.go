// Package plan provides what memory planning needs besides the optimizer's
// own prediction (optimizer.PredictMemory): the shapes of the models people
// plan for (GPT-2 and GPT-3 style, Llama style with a SwiGLU FFN and
// grouped-query attention, tied or untied embeddings) as named presets,
// the published bytes per parameter of the configurations users run today
// (Megatron's distributed optimizer, with and without --fp8-param-gather
// and BF16 moments), the memory of common GPUs, and parameter counts
// written as people write them ("70B", "70e9").
//
// It also models the time of a step's collectives (PredictStep, an
// alpha-beta model calibrated on H200s). `distopt plan` and
// examples/multigpu are built on it; the optimizer package knows nothing
// of it.
package plan
