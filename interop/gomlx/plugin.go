package gomlxinterop

// The plugin's places are declared without cgo, so that programs that name
// them (flags, help texts) build everywhere.

// PluginEnv names the environment variable that gives the PJRT CUDA
// plugin's path when XLAConfig.PluginPath is empty.
const PluginEnv = "DISTOPT_XLA_PLUGIN"

// DefaultCUDAPlugin is where JAX's CUDA 13 PJRT plugin lies in the
// virtual environment of this project's GPU machine; tried last.
const DefaultCUDAPlugin = "/opt/torch/.venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
