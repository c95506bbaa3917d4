// Reference token + position embedding: plain loops, sums in fp64, each output rounded once.
#include "kernels/cpu/ref_util.h"
#include "kernels/embedding.h"

#include <algorithm>
#include <numeric>
#include <type_traits>
#include <vector>

namespace fp8rt::cpu {
namespace {

using ref::Load;
using ref::Store;

Status CheckArgs(const char* op, int64_t B, int64_t seq_len, int64_t C, int64_t V,
                 const int32_t* tokens) {
  if (B < 0 || seq_len < 0 || C < 0) {
    return Status::InvalidArgument(
        StrCat(op, ": B=", B, " T=", seq_len, " C=", C, ": dimensions must be >= 0"));
  }
  if (V < 1 || V > INT32_MAX) {
    return Status::InvalidArgument(StrCat(op, ": V=", V, " must be in [1, 2^31)"));
  }
  const int64_t n = B * seq_len;
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) {
      return Status::InvalidArgument(
          StrCat(op, ": tokens[", i, "]=", tokens[i], " is outside the vocabulary [0, ", V, ")"));
    }
  }
  return Status::Ok();
}

}  // namespace

template <typename T>
Status EmbeddingForward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int64_t B,
                        int64_t seq_len, int64_t C, int64_t V) {
  if (B * seq_len * C > 0 && (!out || !tokens || !wte)) {
    return Status::InvalidArgument("EmbeddingForward: out, tokens and wte must be non-null");
  }
  if (B * seq_len > 0 && !tokens) return Status::InvalidArgument("EmbeddingForward: null tokens");
  FP8RT_RETURN_IF_ERROR(CheckArgs("EmbeddingForward", B, seq_len, C, V, tokens));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < seq_len; ++t) {
      const int64_t pos = b * seq_len + t;
      const T* te = wte + int64_t{tokens[pos]} * C;
      T* o = out + pos * C;
      if (wpe == nullptr) {
        for (int64_t c = 0; c < C; ++c) o[c] = te[c];
        continue;
      }
      const T* pe = wpe + t * C;
      for (int64_t c = 0; c < C; ++c) o[c] = Store<T>(Load(te[c]) + Load(pe[c]));
    }
  }
  return Status::Ok();
}

namespace {

// dwte's window [lo, lo + count) of its flat (V, C) elements: group the n positions by token
// (stable, so increasing position within a token), sum each group in fp64, add once. The order
// the CUDA kernel uses, without a (V, C) fp64 buffer.
template <typename T>
void AddTokenRows(float* dst, int64_t lo, int64_t count, const T* dout, const int32_t* tokens,
                  int64_t n, int64_t C) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return tokens[a] < tokens[b]; });
  std::vector<double> acc(static_cast<size_t>(C));
  for (int64_t i = 0; i < n;) {
    const int32_t tok = tokens[order[i]];
    const int64_t row = int64_t{tok} * C;
    const int64_t c0 = std::max<int64_t>(0, lo - row), c1 = std::min<int64_t>(C, lo + count - row);
    std::fill(acc.begin(), acc.end(), 0.0);
    for (; i < n && tokens[order[i]] == tok; ++i) {
      const T* d = dout + order[i] * C;
      for (int64_t c = c0; c < c1; ++c) acc[c] += Load(d[c]);
    }
    for (int64_t c = c0; c < c1; ++c) dst[row + c - lo] += static_cast<float>(acc[c]);
  }
}

}  // namespace

template <typename T>
Status EmbeddingBackward(float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int64_t B,
                         int64_t seq_len, int64_t C, int64_t V) {
  // (dwte may be null: the position table alone)
  if (B * seq_len * C > 0 && (!dout || !tokens)) {
    return Status::InvalidArgument("EmbeddingBackward: dout and tokens must be non-null");
  }
  if (B * seq_len > 0 && !tokens) return Status::InvalidArgument("EmbeddingBackward: null tokens");
  FP8RT_RETURN_IF_ERROR(CheckArgs("EmbeddingBackward", B, seq_len, C, V, tokens));
  std::vector<double> acc(static_cast<size_t>(C));
  // dwpe: each position t sums its B rows, then adds once.
  for (int64_t t = 0; t < seq_len && dwpe != nullptr; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t b = 0; b < B; ++b) {
      const T* d = dout + (b * seq_len + t) * C;
      for (int64_t c = 0; c < C; ++c) acc[c] += Load(d[c]);
    }
    for (int64_t c = 0; c < C; ++c) dwpe[t * C + c] += static_cast<float>(acc[c]);
  }
  if (dwte != nullptr) AddTokenRows(dwte, 0, V * C, dout, tokens, B * seq_len, C);
  return Status::Ok();
}

template <typename T>
Status EmbeddingBackwardSlice(float* dst, int64_t lo, int64_t count, const T* dout,
                              const int32_t* tokens, int64_t n, int64_t C, int64_t V) {
  if ((n > 0 && !tokens) || (n * C > 0 && count > 0 && (!dst || !dout))) {
    return Status::InvalidArgument("EmbeddingBackwardSlice: dst, dout and tokens must be non-null");
  }
  FP8RT_RETURN_IF_ERROR(CheckArgs("EmbeddingBackwardSlice", n, 1, C, V, tokens));
  if (lo < 0 || count < 0) {
    return Status::InvalidArgument(StrCat("EmbeddingBackwardSlice: the window [", lo, ", ",
                                          lo + count, ") must start at 0 or after and not be "
                                          "negative in length"));
  }
  if (count > 0) AddTokenRows(dst, lo, count, dout, tokens, n, C);
  return Status::Ok();
}

#define FP8RT_INSTANTIATE(T)                                                                       \
  template Status EmbeddingForward<T>(T*, const int32_t*, const T*, const T*, int64_t, int64_t,    \
                                      int64_t, int64_t);                                           \
  template Status EmbeddingBackward<T>(float*, float*, const T*, const int32_t*, int64_t, int64_t, \
                                       int64_t, int64_t);                                           \
  template Status EmbeddingBackwardSlice<T>(float*, int64_t, int64_t, const T*, const int32_t*,    \
                                            int64_t, int64_t, int64_t);
FP8RT_INSTANTIATE(float)
FP8RT_INSTANTIATE(bf16)
FP8RT_INSTANTIATE(double)
#undef FP8RT_INSTANTIATE

}  // namespace fp8rt::cpu
