// Reference causal attention: plain loops per (batch, head), double accumulation, rounding to T
// exactly where the CUDA version stores T. Heads run on a few threads (they write disjoint
// columns of the outputs).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/parallel_for.h"

namespace fp8rt {
namespace {

template <typename T>
double ToD(T v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return ToFloat(v);
  }
}
template <typename T>
T FromD(double v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    return T(static_cast<float>(v));
  }
}
// The value a T store of v reads back as.
template <typename T>
double RoundTo(double v) {
  return ToD(FromD<T>(v));
}

// z[t2] = (q_t . k_t2) * mult for t2 <= t, for batch b and head h; returns their max.
template <typename T>
double ScoreRow(const T* qkv, const AttentionShape& s, int64_t b, int64_t h, int64_t t, double mult,
                std::vector<double>& z) {
  const int64_t C = s.C(), HS = s.HS, seq = s.T;
  const T* q = qkv + (b * seq + t) * 3 * C + h * HS;
  double mx = -INFINITY;
  for (int64_t t2 = 0; t2 <= t; ++t2) {
    const T* k = qkv + (b * seq + t2) * 3 * C + C + h * HS;
    double dot = 0;
    for (int64_t d = 0; d < HS; ++d) dot += ToD(q[d]) * ToD(k[d]);
    z[t2] = dot * mult;
    mx = std::max(mx, z[t2]);
  }
  return mx;
}

Status CheckPointers(std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  for (const auto& [name, p] : ptrs) {
    if (p == nullptr) return Status::InvalidArgument(StrCat("attention: ", name, " is null"));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateAttention(const AttentionShape& s) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.HS < 1) {
    return Status::InvalidArgument(StrCat("attention: B=", s.B, " T=", s.T, " NH=", s.NH,
                                          " HS=", s.HS, "; every dimension must be >= 1"));
  }
  return Status::Ok();
}

size_t AttentionScratchBytes(const AttentionShape& s, DType t) {
  return AttentionScratchPlan(s, t).total;
}

namespace cpu {

template <typename T>
Status AttentionForward(T* out, T* att, const T* qkv, const AttentionShape& s) {
  FP8RT_RETURN_IF_ERROR(ValidateAttention(s));
  FP8RT_RETURN_IF_ERROR(CheckPointers({{"out", out}, {"att", att}, {"qkv", qkv}}));
  const int64_t C = s.C(), HS = s.HS, seq = s.T;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  ParallelFor(s.B * s.NH, double(seq) * seq * HS, [&](int64_t bh) {
    const int64_t b = bh / s.NH, h = bh % s.NH;
    std::vector<double> p(static_cast<size_t>(seq));
    for (int64_t t = 0; t < seq; ++t) {
      const double mx = ScoreRow(qkv, s, b, h, t, scale, p);
      double sum = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) sum += (p[t2] = std::exp(p[t2] - mx));
      T* arow = att + (bh * seq + t) * seq;
      for (int64_t t2 = 0; t2 < seq; ++t2) arow[t2] = FromD<T>(t2 <= t ? p[t2] / sum : 0.0);
      T* o = out + (b * seq + t) * C + h * HS;
      for (int64_t d = 0; d < HS; ++d) {
        double acc = 0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          acc += ToD(arow[t2]) * ToD(qkv[(b * seq + t2) * 3 * C + 2 * C + h * HS + d]);
        }
        o[d] = FromD<T>(acc);
      }
    }
  });
  return Status::Ok();
}

template <typename T>
Status AttentionBackward(T* dqkv, const T* dout, const T* qkv, const T* att,
                         const AttentionShape& s) {
  FP8RT_RETURN_IF_ERROR(ValidateAttention(s));
  FP8RT_RETURN_IF_ERROR(
      CheckPointers({{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"att", att}}));
  const int64_t C = s.C(), HS = s.HS, seq = s.T;
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  ParallelFor(s.B * s.NH, 4.0 * seq * seq * HS, [&](int64_t bh) {
    const int64_t b = bh / s.NH, h = bh % s.NH;
    auto q = [&](int64_t t, int64_t d) { return ToD(qkv[(b * seq + t) * 3 * C + h * HS + d]); };
    auto k = [&](int64_t t, int64_t d) { return ToD(qkv[(b * seq + t) * 3 * C + C + h * HS + d]); };
    auto v = [&](int64_t t, int64_t d) {
      return ToD(qkv[(b * seq + t) * 3 * C + 2 * C + h * HS + d]);
    };
    auto dy = [&](int64_t t, int64_t d) { return ToD(dout[(b * seq + t) * C + h * HS + d]); };
    const T* a = att + bh * seq * seq;
    std::vector<double> dq(static_cast<size_t>(seq * HS)), dk(dq.size()), dv(dq.size());
    std::vector<double> datt(static_cast<size_t>(seq)), dpre(static_cast<size_t>(seq));
    for (int64_t t = 0; t < seq; ++t) {
      // datt = dy v^T (row t); dv += att^T dy.
      double dot = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        double acc = 0;
        for (int64_t d = 0; d < HS; ++d) acc += dy(t, d) * v(t2, d);
        datt[t2] = acc;
        dot += ToD(a[t * seq + t2]) * acc;
        for (int64_t d = 0; d < HS; ++d) dv[t2 * HS + d] += ToD(a[t * seq + t2]) * dy(t, d);
      }
      // Softmax backward, rounded to T as the CUDA version stores it for the next GEMMs.
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        dpre[t2] = RoundTo<T>(ToD(a[t * seq + t2]) * (datt[t2] - dot));
      }
      for (int64_t t2 = 0; t2 <= t; ++t2) {
        for (int64_t d = 0; d < HS; ++d) {
          dq[t * HS + d] += scale * dpre[t2] * k(t2, d);
          dk[t2 * HS + d] += scale * dpre[t2] * q(t, d);
        }
      }
    }
    for (int64_t t = 0; t < seq; ++t) {
      T* row = dqkv + (b * seq + t) * 3 * C + h * HS;
      for (int64_t d = 0; d < HS; ++d) {
        row[d] = FromD<T>(dq[t * HS + d]);
        row[C + d] = FromD<T>(dk[t * HS + d]);
        row[2 * C + d] = FromD<T>(dv[t * HS + d]);
      }
    }
  });
  return Status::Ok();
}

template <typename T>
Status AttentionLse(float* lse, const T* qkv, const AttentionShape& s) {
  FP8RT_RETURN_IF_ERROR(ValidateAttention(s));
  FP8RT_RETURN_IF_ERROR(CheckPointers({{"lse", lse}, {"qkv", qkv}}));
  const int64_t HS = s.HS, seq = s.T;
  const double scale_log2 = 1.0 / std::sqrt(static_cast<double>(HS)) / std::log(2.0);
  ParallelFor(s.B * s.NH, double(seq) * seq * HS, [&](int64_t bh) {
    const int64_t b = bh / s.NH, h = bh % s.NH;
    std::vector<double> z(static_cast<size_t>(seq));
    for (int64_t t = 0; t < seq; ++t) {
      const double mx = ScoreRow(qkv, s, b, h, t, scale_log2, z);
      double sum = 0;
      for (int64_t t2 = 0; t2 <= t; ++t2) sum += std::exp2(z[t2] - mx);
      lse[bh * seq + t] = static_cast<float>(mx + std::log2(sum));
    }
  });
  return Status::Ok();
}

#define FP8RT_INSTANTIATE_ATTENTION(T)                                                       \
  template Status AttentionForward<T>(T*, T*, const T*, const AttentionShape&);              \
  template Status AttentionBackward<T>(T*, const T*, const T*, const T*, const AttentionShape&); \
  template Status AttentionLse<T>(float*, const T*, const AttentionShape&);
FP8RT_INSTANTIATE_ATTENTION(float)
FP8RT_INSTANTIATE_ATTENTION(bf16)
FP8RT_INSTANTIATE_ATTENTION(double)
#undef FP8RT_INSTANTIATE_ATTENTION

}  // namespace cpu
}  // namespace fp8rt
