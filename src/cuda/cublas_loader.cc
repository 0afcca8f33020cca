#include "cuda/cublas_loader.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#ifndef PETREL_CUDA_LIB_DIR
#define PETREL_CUDA_LIB_DIR ""
#endif

namespace petrel::cuda {
namespace {

struct Library {
  void* handle = nullptr;
  std::string error;
};

const Library& Cublas() {
  static const Library library = [] {
    Library opened;
    const std::string major = std::to_string(CUBLAS_VER_MAJOR);
    const std::string dir = PETREL_CUDA_LIB_DIR;
    for (const std::string& name :
         {dir.empty() ? std::string() : dir + "/libcublas.so." + major, "libcublas.so." + major}) {
      if (name.empty()) continue;
      opened.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (opened.handle) return opened;
      const char* why = dlerror();
      opened.error = why ? why : ("cannot open " + name);
    }
    return opened;
  }();
  return library;
}

// The library's function `name`, or null.
void* ResolveSymbol(const char* name) {
  const Library& library = Cublas();
  return library.handle ? dlsym(library.handle, name) : nullptr;
}

}  // namespace

Status LoadCublas() {
  const Library& library = Cublas();
  if (library.handle == nullptr)
    return Error("cuda: cannot load cuBLAS: %s", library.error.c_str());
  return Status::Ok();
}

}  // namespace petrel::cuda

namespace petrel::cuda {

// Calls `symbol` as a function of the forwarder's own parameter types (deduced from the
// arguments, which are the forwarder's parameters), or returns `fail` when it was not found. The
// types are deduced rather than taken with decltype because C++ overloads some of these names.
template <typename R, typename... A>
R CallResolved(void* symbol, R fail, A... args) {
  return symbol ? reinterpret_cast<R (*)(A...)>(symbol)(args...) : fail;
}

}  // namespace petrel::cuda

// Each forwarder resolves its function once; without the library it reports "not initialized".
#define PETREL_CUBLAS_CALL(name, ...)                             \
  static void* const symbol = petrel::cuda::ResolveSymbol(#name); \
  return petrel::cuda::CallResolved(symbol, CUBLAS_STATUS_NOT_INITIALIZED, __VA_ARGS__)

cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t* handle) {
  PETREL_CUBLAS_CALL(cublasCreate_v2, handle);
}

cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
  PETREL_CUBLAS_CALL(cublasDestroy_v2, handle);
}

cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  PETREL_CUBLAS_CALL(cublasSetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  PETREL_CUBLAS_CALL(cublasGetStream_v2, handle, stream);
}

cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  PETREL_CUBLAS_CALL(cublasSetMathMode, handle, mode);
}

cublasStatus_t CUBLASWINAPI cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                                  size_t workspace_bytes) {
  PETREL_CUBLAS_CALL(cublasSetWorkspace_v2, handle, workspace, workspace_bytes);
}

const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static void* const symbol = petrel::cuda::ResolveSymbol("cublasGetStatusString");
  return petrel::cuda::CallResolved<const char*>(symbol, "cuBLAS is not loaded", status);
}

const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static void* const symbol = petrel::cuda::ResolveSymbol("cublasGetStatusName");
  return petrel::cuda::CallResolved<const char*>(symbol, "CUBLAS_STATUS_NOT_LOADED", status);
}

cublasStatus_t CUBLASWINAPI cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const float* alpha, const float* a, int lda,
                                           const float* b, int ldb, const float* beta, float* c,
                                           int ldc) {
  PETREL_CUBLAS_CALL(cublasSgemm_v2, handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta,
                     c, ldc);
}

cublasStatus_t CUBLASWINAPI cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* a, cudaDataType a_type,
                                         int lda, const void* b, cudaDataType b_type, int ldb,
                                         const void* beta, void* c, cudaDataType c_type, int ldc,
                                         cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  PETREL_CUBLAS_CALL(cublasGemmEx, handle, transa, transb, m, n, k, alpha, a, a_type, lda, b,
                     b_type, ldb, beta, c, c_type, ldc, compute, algo);
}

cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* a, cudaDataType a_type, int lda, long long int stride_a,
    const void* b, cudaDataType b_type, int ldb, long long int stride_b, const void* beta, void* c,
    cudaDataType c_type, int ldc, long long int stride_c, int batch_count,
    cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  PETREL_CUBLAS_CALL(cublasGemmStridedBatchedEx, handle, transa, transb, m, n, k, alpha, a, a_type,
                     lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c,
                     batch_count, compute, algo);
}
