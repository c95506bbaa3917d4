// Reference AdamW: the update in fp64 per element, master/moments stored back as fp32.
#include "kernels/adamw.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/scaling.h"

namespace fp8rt::cpu {
namespace {

// The per-step constants of the update, folded once.
struct StepConsts {
  double lr, beta1, beta2, eps, wd, bias1, bias2, clip;
};

Status Prepare(const char* op, int64_t n, int step, const AdamWConfig& cfg, float weight_decay,
               const float* grad_norm_sq, float max_grad_norm, StepConsts* k) {
  FP8RT_RETURN_IF_ERROR(
      ValidateAdamWArgs(op, n, step, cfg, weight_decay, grad_norm_sq, max_grad_norm));
  k->lr = cfg.lr;
  k->beta1 = cfg.beta1;
  k->beta2 = cfg.beta2;
  k->eps = cfg.eps;
  k->wd = weight_decay;
  k->bias1 = 1.0 - std::pow(static_cast<double>(cfg.beta1), step);
  k->bias2 = 1.0 - std::pow(static_cast<double>(cfg.beta2), step);
  k->clip = 1.0;
  if (max_grad_norm > 0.0f) {
    k->clip = std::min(1.0, max_grad_norm / (std::sqrt(static_cast<double>(*grad_norm_sq)) + 1e-6));
  }
  return Status::Ok();
}

double Widen(float x) { return x; }
double Widen(bf16 x) { return static_cast<float>(x); }
// A moment stored as M: fp32, or bf16 rounded to nearest even from the fp32 value.
template <typename M>
M Store(double x) {
  if constexpr (std::is_same_v<M, float>) {
    return static_cast<float>(x);
  } else {
    return bf16(static_cast<float>(x));
  }
}

// Updates element i in place and returns the new fp32 master value.
template <typename M>
float UpdateOne(float* master, M* m, M* v, const float* grad, int64_t i, const StepConsts& k) {
  const double g = grad[i] * k.clip;
  const double mi = k.beta1 * Widen(m[i]) + (1.0 - k.beta1) * g;
  const double vi = k.beta2 * Widen(v[i]) + (1.0 - k.beta2) * g * g;
  const double m_hat = mi / k.bias1, v_hat = vi / k.bias2;
  const double p = master[i];
  m[i] = Store<M>(mi);
  v[i] = Store<M>(vi);
  master[i] = static_cast<float>(p - k.lr * (m_hat / (std::sqrt(v_hat) + k.eps) + k.wd * p));
  return master[i];
}

}  // namespace

template <typename T, typename M>
Status AdamW(float* master, M* m, M* v, const float* grad, T* working, int64_t n, int step,
             const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
             float max_grad_norm) {
  StepConsts k;
  FP8RT_RETURN_IF_ERROR(
      Prepare("AdamW", n, step, cfg, weight_decay, grad_norm_sq, max_grad_norm, &k));
  if (n > 0 && (!master || !m || !v || !grad)) {
    return Status::InvalidArgument("AdamW: master, m, v and grad must be non-null");
  }
  for (int64_t i = 0; i < n; ++i) {
    const float p = UpdateOne(master, m, v, grad, i, k);
    if (working) {
      if constexpr (std::is_same_v<T, double>) {
        working[i] = p;
      } else {
        working[i] = T(p);
      }
    }
  }
  return Status::Ok();
}

template <typename M>
Status AdamWFp8(float* master, M* m, M* v, const float* grad, const Fp8Tensor& working, int step,
                const AdamWConfig& cfg, float weight_decay, const float* grad_norm_sq,
                float max_grad_norm) {
  if (working.rows < 0 || working.cols < 0) {
    return Status::InvalidArgument(StrCat("AdamWFp8: working shape (", working.rows, ", ",
                                          working.cols, ") has a negative dimension"));
  }
  const int64_t n = working.numel();
  StepConsts k;
  FP8RT_RETURN_IF_ERROR(
      Prepare("AdamWFp8", n, step, cfg, weight_decay, grad_norm_sq, max_grad_norm, &k));
  if (!working.scale || !working.scale_inv) {
    return Status::InvalidArgument(
        "AdamWFp8: working.scale and working.scale_inv must be non-null");
  }
  if (n > 0 && (!master || !m || !v || !grad || !working.data)) {
    return Status::InvalidArgument(
        "AdamWFp8: master, m, v, grad and working.data must be non-null");
  }
  if (working.data_t != nullptr && working.data_t == working.data) {
    return Status::InvalidArgument("AdamWFp8: working.data_t must not alias working.data");
  }
  const float scale = *working.scale;
  // |p| as the int of its bit pattern (NaN above +inf), the order the GPU's atomicMax uses.
  int32_t amax_bits = 0;
  for (int64_t r = 0; r < working.rows; ++r) {
    for (int64_t c = 0; c < working.cols; ++c) {
      const int64_t i = r * working.cols + c;
      const float p = UpdateOne(master, m, v, grad, i, k);
      const uint8_t q = Fp8Encode(p * scale, working.format);
      working.data[i] = q;
      if (working.data_t) working.data_t[c * working.rows + r] = q;
      amax_bits = std::max(amax_bits, static_cast<int32_t>(FloatBits(p) & 0x7fffffffu));
    }
  }
  if (working.amax) {
    const int32_t cur = static_cast<int32_t>(FloatBits(*working.amax));
    *working.amax = BitsFloat(static_cast<uint32_t>(std::max(cur, amax_bits)));
  }
  *working.scale_inv = ScaleInv(scale);
  return Status::Ok();
}

#define FP8RT_ADAMW_INSTANTIATE(T, M)                                                        \
  template Status AdamW<T, M>(float*, M*, M*, const float*, T*, int64_t, int, const AdamWConfig&, \
                              float, const float*, float);
FP8RT_ADAMW_INSTANTIATE(float, float)
FP8RT_ADAMW_INSTANTIATE(bf16, float)
FP8RT_ADAMW_INSTANTIATE(double, float)
FP8RT_ADAMW_INSTANTIATE(float, bf16)
FP8RT_ADAMW_INSTANTIATE(bf16, bf16)
FP8RT_ADAMW_INSTANTIATE(double, bf16)
#undef FP8RT_ADAMW_INSTANTIATE
template Status AdamWFp8<float>(float*, float*, float*, const float*, const Fp8Tensor&, int,
                                const AdamWConfig&, float, const float*, float);
template Status AdamWFp8<bf16>(float*, bf16*, bf16*, const float*, const Fp8Tensor&, int,
                               const AdamWConfig&, float, const float*, float);

}  // namespace fp8rt::cpu

namespace fp8rt {

Status ValidateAdamWArgs(const char* op, int64_t n, int step, const AdamWConfig& cfg,
                         float weight_decay, const float* grad_norm_sq, float max_grad_norm) {
  if (n < 0) return Status::InvalidArgument(StrCat(op, ": n=", n, " must be >= 0"));
  if (step < 1) return Status::InvalidArgument(StrCat(op, ": step=", step, " must be >= 1"));
  if (!(cfg.beta1 >= 0.0f && cfg.beta1 < 1.0f) || !(cfg.beta2 >= 0.0f && cfg.beta2 < 1.0f)) {
    return Status::InvalidArgument(
        StrCat(op, ": beta1=", cfg.beta1, " beta2=", cfg.beta2, " must lie in [0, 1)"));
  }
  if (!(cfg.eps > 0.0f))
    return Status::InvalidArgument(StrCat(op, ": eps=", cfg.eps, " must be > 0"));
  if (!std::isfinite(cfg.lr)) {
    return Status::InvalidArgument(StrCat(op, ": lr=", cfg.lr, " must be finite"));
  }
  if (!(weight_decay >= 0.0f) || !std::isfinite(weight_decay)) {
    return Status::InvalidArgument(
        StrCat(op, ": weight_decay=", weight_decay, " must be finite and >= 0"));
  }
  if (max_grad_norm > 0.0f && grad_norm_sq == nullptr) {
    return Status::InvalidArgument(
        StrCat(op, ": max_grad_norm=", max_grad_norm, " > 0 needs grad_norm_sq (it is null)"));
  }
  return Status::Ok();
}

}  // namespace fp8rt
