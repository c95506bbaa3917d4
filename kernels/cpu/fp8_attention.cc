// Reference FP8 attention: cuDNN's FP8 SDPA graphs emulated on the CPU, in fp64, with the same
// quantization points (the probabilities before the second matmul, dS before the dQ/dK matmuls,
// the outputs), one (batch, query head) per task.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/parallel_for.h"
#include "kernels/fp8_attention.h"

namespace fp8rt {

Status ValidateFp8Attention(const Fp8AttentionShape& s) {
  if (s.B < 1 || s.T < 1 || s.NH < 1 || s.NKV < 1 || s.HS < 1) {
    return Status::InvalidArgument(StrCat("fp8 attention: B=", s.B, " T=", s.T, " NH=", s.NH,
                                          " NKV=", s.NKV, " HS=", s.HS,
                                          "; every dimension must be >= 1"));
  }
  if (s.NH % s.NKV != 0) {
    return Status::InvalidArgument(StrCat("fp8 attention: NH=", s.NH,
                                          " is not a multiple of NKV=", s.NKV));
  }
  return Status::Ok();
}

namespace cpu {
namespace {

Status CheckScales(const char* op, std::initializer_list<std::pair<const char*, const void*>> ps) {
  for (const auto& [name, p] : ps) {
    if (p == nullptr) return Status::InvalidArgument(StrCat(op, ": ", name, " is null"));
  }
  return Status::Ok();
}

// Max of |x| as fp32 bit patterns (NaN above +inf, as the linear layers' amaxes).
void AmaxInto(float* amax, double x) {
  const float f = std::fabs(static_cast<float>(x));
  if (std::isnan(f) || std::isnan(*amax)) {
    *amax = std::numeric_limits<float>::quiet_NaN();
  } else {
    *amax = std::max(*amax, f);
  }
}

// The decoded, descaled element (row t, head h, dim d) of a packed (B, T, width) FP8 tensor.
struct View {
  const uint8_t* base;
  int64_t width;
  Fp8Format f;
  double descale;
  double at(int64_t b, int64_t T, int64_t t, int64_t col) const {
    return Fp8Decode(base[(b * T + t) * width + col], f) * descale;
  }
};

// The scores of query i of (b, h) against keys j <= i, scaled: s[j].
void Scores(const View& q, const View& k, int64_t b, int64_t T, int64_t qcol, int64_t kcol,
            int64_t HS, int64_t i, double a, std::vector<double>* s) {
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < HS; ++d) dot += q.at(b, T, i, qcol + d) * k.at(b, T, j, kcol + d);
    (*s)[static_cast<size_t>(j)] = a * dot;
  }
}

}  // namespace

Status Fp8AttentionForward(uint8_t* out, float* stats, const uint8_t* qkv,
                           const Fp8AttentionShape& s, const Fp8AttentionScales& sc,
                           Fp8AttentionFormats f) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Attention(s));
  FP8RT_RETURN_IF_ERROR(CheckScales(
      "Fp8AttentionForward", {{"out", out}, {"stats", stats}, {"qkv", qkv},
                              {"descale_q", sc.descale_q}, {"descale_k", sc.descale_k},
                              {"descale_v", sc.descale_v}, {"scale_s", sc.scale_s},
                              {"descale_s", sc.descale_s}, {"scale_o", sc.scale_o},
                              {"amax_s", sc.amax_s}, {"amax_o", sc.amax_o}}));
  const int64_t B = s.B, T = s.T, NH = s.NH, HS = s.HS, W = s.QkvWidth(), C = s.C();
  const int64_t group = NH / s.NKV;
  const double a = 1.0 / std::sqrt(static_cast<double>(HS));
  const View q{qkv, W, f.fwd, *sc.descale_q}, k{qkv, W, f.fwd, *sc.descale_k},
      v{qkv, W, f.fwd, *sc.descale_v};
  const double scale_s = *sc.scale_s, descale_s = *sc.descale_s, scale_o = *sc.scale_o;
  std::vector<float> amax_s(static_cast<size_t>(B * NH), 0.f), amax_o(amax_s);
  ParallelFor(B * NH, 2.0 * T * T * HS, [&](int64_t bh) {
    const int64_t b = bh / NH, h = bh % NH, kvh = h / group;
    const int64_t qcol = h * HS, kcol = NH * HS + kvh * HS, vcol = (NH + s.NKV) * HS + kvh * HS;
    std::vector<double> sc_row(static_cast<size_t>(T)), o(static_cast<size_t>(HS));
    for (int64_t i = 0; i < T; ++i) {
      Scores(q, k, b, T, qcol, kcol, HS, i, a, &sc_row);
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j <= i; ++j) m = std::max(m, sc_row[j]);
      double z = 0;
      for (int64_t j = 0; j <= i; ++j) z += std::exp(sc_row[j] - m);
      stats[(b * NH + h) * T + i] = static_cast<float>(m + std::log(z));
      std::fill(o.begin(), o.end(), 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        const double p = std::exp(sc_row[j] - m) / z;
        AmaxInto(&amax_s[bh], p);
        const double p8 = Fp8Decode(Fp8Encode(static_cast<float>(p * scale_s), f.fwd), f.fwd) *
                          descale_s;
        for (int64_t d = 0; d < HS; ++d) o[d] += p8 * v.at(b, T, j, vcol + d);
      }
      for (int64_t d = 0; d < HS; ++d) {
        AmaxInto(&amax_o[bh], o[d]);
        out[(b * T + i) * C + qcol + d] = Fp8Encode(static_cast<float>(o[d] * scale_o), f.fwd);
      }
    }
  });
  *sc.amax_s = 0, *sc.amax_o = 0;
  for (size_t i = 0; i < amax_s.size(); ++i) AmaxInto(sc.amax_s, amax_s[i]);
  for (size_t i = 0; i < amax_o.size(); ++i) AmaxInto(sc.amax_o, amax_o[i]);
  return Status::Ok();
}

Status Fp8AttentionBackward(uint8_t* dqkv, const uint8_t* dout, const uint8_t* qkv,
                            const uint8_t* out, const float* stats, const Fp8AttentionShape& s,
                            const Fp8AttentionScales& sc, Fp8AttentionFormats f) {
  FP8RT_RETURN_IF_ERROR(ValidateFp8Attention(s));
  FP8RT_RETURN_IF_ERROR(CheckScales(
      "Fp8AttentionBackward",
      {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"stats", stats},
       {"descale_q", sc.descale_q}, {"descale_k", sc.descale_k}, {"descale_v", sc.descale_v},
       {"scale_s", sc.scale_s}, {"descale_s", sc.descale_s}, {"descale_o", sc.descale_o},
       {"descale_do", sc.descale_do}, {"scale_dp", sc.scale_dp}, {"descale_dp", sc.descale_dp},
       {"scale_dq", sc.scale_dq}, {"scale_dk", sc.scale_dk}, {"scale_dv", sc.scale_dv},
       {"amax_dp", sc.amax_dp}, {"amax_dq", sc.amax_dq}, {"amax_dk", sc.amax_dk},
       {"amax_dv", sc.amax_dv}}));
  const int64_t B = s.B, T = s.T, NH = s.NH, NKV = s.NKV, HS = s.HS, W = s.QkvWidth(), C = s.C();
  const int64_t group = NH / NKV;
  const double a = 1.0 / std::sqrt(static_cast<double>(HS));
  const View q{qkv, W, f.fwd, *sc.descale_q}, k{qkv, W, f.fwd, *sc.descale_k},
      v{qkv, W, f.fwd, *sc.descale_v}, o{out, C, f.fwd, *sc.descale_o},
      dov{dout, C, f.bwd, *sc.descale_do};
  const double scale_s = *sc.scale_s, descale_s = *sc.descale_s, scale_dp = *sc.scale_dp,
               descale_dp = *sc.descale_dp;
  // FP64 dQ per (b, query head); dK, dV per (b, key/value head), summed over its query heads.
  const size_t heads = static_cast<size_t>(T * HS);
  std::vector<double> dq(static_cast<size_t>(B * NH) * heads, 0.0);
  std::vector<double> dk(static_cast<size_t>(B * NKV) * heads, 0.0), dv(dk);
  std::vector<float> amax_dp(static_cast<size_t>(B * NKV), 0.f);
  // One task per (b, key/value head): its query heads in turn, so dK and dV have one writer.
  ParallelFor(B * NKV, 4.0 * group * T * T * HS, [&](int64_t bk) {
    const int64_t b = bk / NKV, kvh = bk % NKV;
    const int64_t kcol = NH * HS + kvh * HS, vcol = (NH + NKV) * HS + kvh * HS;
    double* dkh = dk.data() + static_cast<size_t>(bk) * heads;
    double* dvh = dv.data() + static_cast<size_t>(bk) * heads;
    std::vector<double> srow(static_cast<size_t>(T));
    for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
      const int64_t qcol = h * HS;
      double* dqh = dq.data() + static_cast<size_t>(b * NH + h) * heads;
      for (int64_t i = 0; i < T; ++i) {
        double D = 0;
        for (int64_t d = 0; d < HS; ++d) D += dov.at(b, T, i, qcol + d) * o.at(b, T, i, qcol + d);
        Scores(q, k, b, T, qcol, kcol, HS, i, a, &srow);
        const double lse = stats[(b * NH + h) * T + i];
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(srow[j] - lse);
          const double s8 =
              Fp8Decode(Fp8Encode(static_cast<float>(p * scale_s), f.fwd), f.fwd) * descale_s;
          double dp = 0;
          for (int64_t d = 0; d < HS; ++d) {
            const double g = dov.at(b, T, i, qcol + d);
            dvh[j * HS + d] += s8 * g;
            dp += g * v.at(b, T, j, vcol + d);
          }
          const double ds = a * p * (dp - D);
          AmaxInto(&amax_dp[bk], ds);
          const double ds8 =
              Fp8Decode(Fp8Encode(static_cast<float>(ds * scale_dp), f.bwd), f.bwd) * descale_dp;
          for (int64_t d = 0; d < HS; ++d) {
            dqh[i * HS + d] += ds8 * k.at(b, T, j, kcol + d);
            dkh[j * HS + d] += ds8 * q.at(b, T, i, qcol + d);
          }
        }
      }
    }
  });
  *sc.amax_dp = 0, *sc.amax_dq = 0, *sc.amax_dk = 0, *sc.amax_dv = 0;
  for (float x : amax_dp) AmaxInto(sc.amax_dp, x);
  // Encode into the packed layout: dQ heads, then dK heads, then dV heads.
  auto put = [&](const std::vector<double>& g, int64_t nheads, int64_t col0, double scale,
                 float* amax) {
    for (int64_t bh = 0; bh < B * nheads; ++bh) {
      const int64_t b = bh / nheads, h = bh % nheads;
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t d = 0; d < HS; ++d) {
          const double x = g[static_cast<size_t>(bh) * heads + t * HS + d];
          AmaxInto(amax, x);
          dqkv[(b * T + t) * W + col0 + h * HS + d] =
              Fp8Encode(static_cast<float>(x * scale), f.bwd);
        }
      }
    }
  };
  put(dq, NH, 0, *sc.scale_dq, sc.amax_dq);
  put(dk, NKV, NH * HS, *sc.scale_dk, sc.amax_dk);
  put(dv, NKV, (NH + NKV) * HS, *sc.scale_dv, sc.amax_dv);
  return Status::Ok();
}

}  // namespace cpu
}  // namespace fp8rt
