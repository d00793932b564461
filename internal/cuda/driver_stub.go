//go:build !cgo || !linux

package cuda

// Without cgo (or off Linux) the driver cannot be opened: openDriver fails,
// so Init fails with ErrNoDriver and no other function here is ever reached.
// They exist so that the package builds.

import (
	"fmt"
	"unsafe"
)

func openDriver(path string) error {
	return fmt.Errorf("%w: %s cannot be opened in a build without cgo", ErrNoDriver, path)
}

// errStub is CUDA_ERROR_NOT_INITIALIZED.
const errStub Result = 3

func gettid() int64                                                    { return -1 }
func cuInit() Result                                                   { return errStub }
func cuDriverGetVersion() (int, Result)                                { return 0, errStub }
func cuGetErrorName(Result) string                                     { return "" }
func cuDeviceGetCount() (int, Result)                                  { return 0, errStub }
func cuDeviceGet(int) (int, Result)                                    { return 0, errStub }
func cuDeviceGetName(int) (string, Result)                             { return "", errStub }
func cuDeviceGetAttribute(deviceAttribute, int) (int, Result)          { return 0, errStub }
func cuDeviceTotalMem(int) (uint64, Result)                            { return 0, errStub }
func cuDeviceGetPCIBusID(int) (string, Result)                         { return "", errStub }
func cuDevicePrimaryCtxRetain(int) (uintptr, Result)                   { return 0, errStub }
func cuDevicePrimaryCtxRelease(int) Result                             { return errStub }
func cuCtxSetCurrent(uintptr) Result                                   { return errStub }
func cuCtxSynchronize() Result                                         { return errStub }
func cuMemGetInfo() (uint64, uint64, Result)                           { return 0, 0, errStub }
func cuMemAlloc(int) (DevicePtr, Result)                               { return 0, errStub }
func cuMemFree(DevicePtr) Result                                       { return errStub }
func cuMemHostAlloc(int, uint32) (unsafe.Pointer, Result)              { return nil, errStub }
func cuMemFreeHost(unsafe.Pointer) Result                              { return errStub }
func cuMemcpyHtoDAsync(DevicePtr, unsafe.Pointer, int, uintptr) Result { return errStub }
func cuMemcpyDtoHAsync(unsafe.Pointer, DevicePtr, int, uintptr) Result { return errStub }
func cuMemcpyDtoDAsync(DevicePtr, DevicePtr, int, uintptr) Result      { return errStub }
func cuMemsetD8Async(DevicePtr, uint8, int, uintptr) Result            { return errStub }
func cuMemsetD32Async(DevicePtr, uint32, int, uintptr) Result          { return errStub }
func cuStreamCreate(uint32) (uintptr, Result)                          { return 0, errStub }
func cuStreamDestroy(uintptr) Result                                   { return errStub }
func cuStreamSynchronize(uintptr) Result                               { return errStub }
func cuStreamQuery(uintptr) Result                                     { return errStub }
func cuStreamWaitEvent(uintptr, uintptr) Result                        { return errStub }
func cuEventCreate(uint32) (uintptr, Result)                           { return 0, errStub }
func cuEventDestroy(uintptr) Result                                    { return errStub }
func cuEventRecord(uintptr, uintptr) Result                            { return errStub }
func cuEventSynchronize(uintptr) Result                                { return errStub }
func cuEventQuery(uintptr) Result                                      { return errStub }
func cuEventElapsedTime(uintptr, uintptr) (float32, Result)            { return 0, errStub }
func cuModuleLoadData([]byte) (uintptr, string, string, Result)        { return 0, "", "", errStub }
func cuModuleUnload(uintptr) Result                                    { return errStub }
func cuModuleGetFunction(uintptr, string) (uintptr, Result)            { return 0, errStub }
func cuFuncGetAttribute(FuncAttribute, uintptr) (int, Result)          { return 0, errStub }
func cuFuncSetAttribute(uintptr, FuncAttribute, int) Result            { return errStub }
func cuLaunchKernel(uintptr, Dim3, Dim3, int, uintptr, *Args) Result   { return errStub }
func cuStreamBeginCapture(uintptr, int) Result                         { return errStub }
func cuStreamEndCapture(uintptr) (uintptr, Result)                     { return 0, errStub }
func cuGraphInstantiate(uintptr) (uintptr, Result)                     { return 0, errStub }
func cuGraphLaunch(uintptr, uintptr) Result                            { return errStub }
func cuGraphExecDestroy(uintptr) Result                                { return errStub }
func cuGraphDestroy(uintptr) Result                                    { return errStub }
func cuStreamIsCapturing(uintptr) (int, Result)                        { return 0, errStub }
func cuStreamWaitValue32(uintptr, DevicePtr, uint32, uint32) Result    { return errStub }
func cuStreamWriteValue32(uintptr, DevicePtr, uint32, uint32) Result   { return errStub }
