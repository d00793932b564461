package kernels

//go:generate ./gen.sh
