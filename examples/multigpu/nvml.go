package main

import (
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuMemory reads through NVML the device memory this process uses on
// one GPU.
//
// Two measures, the first that works:
//
//   - "process": the usedGpuMemory that nvmlDeviceGetComputeRunningProcesses
//     reports for this process's pid: everything the driver holds for the
//     process on that GPU (CUDA context, loaded modules, NCCL's buffers,
//     every allocation, rounded to the driver's pages). This is what
//     nvidia-smi shows per process.
//   - "device": the GPU's used memory (nvmlDeviceGetMemoryInfo_v2, which
//     leaves out the driver's reserved memory) minus what was used when
//     openGPUMemory ran, before this process created its context. It is the
//     same quantity when this process is the GPU's only user, and it is the
//     fallback where NVML cannot see the process (a pid namespace).
type gpuMemory struct {
	dev  nvml.Device
	pid  uint32
	idle uint64
}

// openGPUMemory initialises NVML and finds the GPU by its PCI bus id (as
// the CUDA driver names it). Call it before this process creates a CUDA
// context on that GPU, so that the device measure starts from zero.
func openGPUMemory(busID string) (*gpuMemory, error) {
	if r := nvml.Init(); r != nvml.SUCCESS {
		return nil, fmt.Errorf("NVML: %v", r)
	}
	dev, r := nvml.DeviceGetHandleByPciBusId(busID)
	if r != nvml.SUCCESS {
		nvml.Shutdown()
		return nil, fmt.Errorf("NVML: GPU %s: %v", busID, r)
	}
	m := &gpuMemory{dev: dev, pid: uint32(os.Getpid())}
	used, err := m.deviceUsed()
	if err != nil {
		nvml.Shutdown()
		return nil, err
	}
	m.idle = used
	return m, nil
}

// deviceUsed is the GPU's used memory, reserved memory excluded where the
// driver reports it apart.
func (m *gpuMemory) deviceUsed() (uint64, error) {
	if v2, r := m.dev.GetMemoryInfo_v2(); r == nvml.SUCCESS {
		return v2.Used, nil
	}
	v1, r := m.dev.GetMemoryInfo()
	if r != nvml.SUCCESS {
		return 0, fmt.Errorf("NVML: memory info: %v", r)
	}
	return v1.Used, nil
}

// used returns this process's device memory in bytes and the measure
// ("process" or "device") it comes from.
func (m *gpuMemory) used() (int64, string, error) {
	if procs, r := m.dev.GetComputeRunningProcesses(); r == nvml.SUCCESS {
		for _, p := range procs {
			if p.Pid == m.pid && p.UsedGpuMemory != 0 && p.UsedGpuMemory != ^uint64(0) {
				return int64(p.UsedGpuMemory), "process", nil
			}
		}
	}
	u, err := m.deviceUsed()
	if err != nil {
		return 0, "", err
	}
	return int64(u) - int64(m.idle), "device", nil
}

// close shuts NVML down.
func (m *gpuMemory) close() { nvml.Shutdown() }
