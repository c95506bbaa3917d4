// CudaOps' own contract: memory it hands out is zeroed before anything the model enqueues next.
#include <cstdint>
#include <vector>

#include "runtime/ops_cuda.h"
#include "tests/common/gpu_util.h"

namespace fp8rt {
namespace {

class OpsCudaGpu : public test::GpuTest {};

// The model allocates a buffer and uploads into it right away (the FP8 format of each tensor,
// the master weights). The zeroing of a fresh allocation must be ordered before that upload:
// zeroed on the legacy default stream, which does not wait for (or make wait) the non-blocking
// compute stream, it could land after the upload and wipe it (seen on 2 x H200: the E5M2 format
// of gradient tensors read back as E4M3 on one rank, so its gradient scales were 128x smaller).
TEST_F(OpsCudaGpu, AFreshBufferKeepsWhatIsUploadedRightAfterTheAllocation) {
  CudaOps ops;
  ASSERT_TRUE(ops.Init(0).ok());
  // A large allocation first (its zeroing takes a while), then a small one uploaded into at
  // once: the order the model's setup allocates in. The small buffer's zeroing must not land
  // after the upload, whichever streams the device runs them on.
  const size_t big_bytes = size_t{1} << 30, bytes = 4096;
  std::vector<uint8_t> pattern(bytes), back(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(1 + i % 251);
  int wiped = 0;
  for (int round = 0; round < 10; ++round) {
    void* big = ops.Alloc(big_bytes);
    auto* p = static_cast<uint8_t*>(ops.Alloc(bytes));
    ASSERT_NE(big, nullptr);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(ops.Upload(p, pattern.data(), bytes).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // everything on every stream has landed
    ASSERT_TRUE(ops.Download(back.data(), p, bytes).ok());
    wiped += back != pattern;
    std::vector<uint8_t> head(4096, 0xff);
    ASSERT_TRUE(ops.Download(head.data(), big, head.size()).ok());
    for (uint8_t b : head) ASSERT_EQ(b, 0) << "a fresh buffer is zeroed";
    ops.Free(p);
    ops.Free(big);
  }
  EXPECT_EQ(wiped, 0) << "of 10 fresh buffers, " << wiped << " lost the bytes uploaded into them";
}

}  // namespace
}  // namespace fp8rt
