// Check macros for CUDA and cuBLAS(Lt) calls: failures become a Status naming file:line, the call
// and the library's own error string. The *_CHECK forms abort instead (tests, benchmarks, main).
#pragma once

#include <cstdio>
#include <cstdlib>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "common/status.h"

#define FP8RT_CUDA_TRY(expr)                                                                   \
  do {                                                                                         \
    cudaError_t fp8rt_err_ = (expr);                                                           \
    if (fp8rt_err_ != cudaSuccess)                                                             \
      return ::fp8rt::Status::Internal(::fp8rt::StrCat(__FILE__, ":", __LINE__, ": ", #expr,   \
                                                       ": ", cudaGetErrorString(fp8rt_err_))); \
  } while (0)

// After a kernel launch: reports a bad configuration or an earlier asynchronous fault.
#define FP8RT_CUDA_TRY_LAUNCH(name)                                                        \
  do {                                                                                     \
    cudaError_t fp8rt_err_ = cudaGetLastError();                                          \
    if (fp8rt_err_ != cudaSuccess)                                                         \
      return ::fp8rt::Status::Internal(::fp8rt::StrCat(__FILE__, ":", __LINE__, ": launch ", \
                                                       name, ": ",                         \
                                                       cudaGetErrorString(fp8rt_err_)));   \
  } while (0)

#define FP8RT_CUBLAS_TRY(expr)                                                          \
  do {                                                                                  \
    cublasStatus_t fp8rt_st_ = (expr);                                                  \
    if (fp8rt_st_ != CUBLAS_STATUS_SUCCESS)                                             \
      return ::fp8rt::Status::Internal(::fp8rt::StrCat(__FILE__, ":", __LINE__, ": ", #expr, \
                                                       ": ", cublasLtGetStatusString(fp8rt_st_))); \
  } while (0)

#define FP8RT_CUDA_CHECK(expr)                                                          \
  do {                                                                                  \
    cudaError_t fp8rt_err_ = (expr);                                                    \
    if (fp8rt_err_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                \
                   cudaGetErrorString(fp8rt_err_));                                     \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#define FP8RT_CHECK_OK(expr)                                                            \
  do {                                                                                  \
    ::fp8rt::Status fp8rt_s_ = (expr);                                                  \
    if (!fp8rt_s_.ok()) {                                                               \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                \
                   fp8rt_s_.ToString().c_str());                                        \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
