package plan

// GPU is an accelerator model and its memory.
type GPU struct {
	Name string
	// Bytes is the memory the driver reports (nvidia-smi's total, in MiB
	// times 2^20): less than the datasheet's HBM, which includes what ECC
	// and the driver keep.
	Bytes int64
}

// GPUs are the GPUs -gpu names. The totals are those nvidia-smi prints for
// each model (for example "81559MiB" on an H100 80GB HBM3, "143771MiB" on
// an H200, "183359MiB" on a B200); the H200's was also seen on this
// project's GPU machine.
var GPUs = []GPU{
	{"a100-40gb", 40960 << 20},
	{"a100-80gb", 81920 << 20},
	{"h100-80gb", 81559 << 20},
	{"h200", 143771 << 20},
	{"b200", 183359 << 20},
}

// gpuAliases are other spellings of GPU names.
var gpuAliases = map[string]string{
	"a100":       "a100-80gb",
	"h100":       "h100-80gb",
	"h200-141gb": "h200",
	"b200-180gb": "b200",
}

// LookupGPU returns the GPU of the given name, compared
// case-insensitively, "_" and "-" alike. An unknown name gives an error
// listing the known ones.
func LookupGPU(name string) (GPU, error) {
	return lookup("GPU", name, GPUs, func(g GPU) string { return g.Name }, gpuAliases)
}
