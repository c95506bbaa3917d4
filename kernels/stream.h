// Brings in cudaStream_t for launcher declarations when CUDA is built; nothing otherwise.
#pragma once

#ifndef FP8RT_WITH_CUDA
#define FP8RT_WITH_CUDA 0
#endif

#if FP8RT_WITH_CUDA
#include <cuda_runtime_api.h>
#endif
