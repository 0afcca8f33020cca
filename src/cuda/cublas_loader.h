// cuBLAS is opened when a CUDA backend starts, not when petrel starts: its libraries are over half
// a gigabyte of address space, which every run on the CPU (and every run under `ulimit -v`) would
// otherwise map. cublas_loader.cc defines the cuBLAS functions petrel calls as forwarders to the
// library opened with dlopen; a call before LoadCublas() succeeded returns
// CUBLAS_STATUS_NOT_INITIALIZED. A kernel file that calls another cuBLAS function adds its
// forwarder there.
#pragma once

#include "core/base/status.h"

namespace petrel::cuda {

// Opens libcublas (the toolkit's, then the loader's search path) once; the error names the library
// and the loader's reason.
Status LoadCublas();

}  // namespace petrel::cuda
