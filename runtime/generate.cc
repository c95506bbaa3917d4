// Text generation with a KV cache on the CPU (runtime/generate.h).
#include "runtime/generate.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <ostream>

#include "common/parallel_for.h"
#include "kernels/rope.h"
#include "runtime/checkpoint.h"
#include "runtime/gpt_layout.h"
#include "runtime/train_checkpoint.h"

namespace fp8rt {
namespace {

// y[o] = b[o] + W[o, :] . x for o < rows (W row-major (rows, cols)), double sums, rows in parallel.
void MatVec(const float* w, const float* b, const float* x, int64_t rows, int64_t cols, float* y) {
  ParallelFor(rows, static_cast<double>(cols), [&](int64_t o) {
    const float* r = w + o * cols;
    double s = b != nullptr ? b[o] : 0.0;
    for (int64_t i = 0; i < cols; ++i) s += double{r[i]} * x[i];
    y[o] = static_cast<float>(s);
  });
}

void LayerNorm(const float* x, const float* w, const float* b, int64_t C, float* y) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < C; ++i) mean += x[i];
  mean /= C;
  for (int64_t i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
  const double rstd = 1.0 / std::sqrt(var / C + 1e-5);
  for (int64_t i = 0; i < C; ++i) y[i] = static_cast<float>((x[i] - mean) * rstd * w[i] + b[i]);
}

void RmsNorm(const float* x, const float* w, int64_t C, float* y) {
  double ss = 0;
  for (int64_t i = 0; i < C; ++i) ss += double{x[i]} * x[i];
  const double rstd = 1.0 / std::sqrt(ss / C + 1e-5);
  for (int64_t i = 0; i < C; ++i) y[i] = static_cast<float>(x[i] * rstd * w[i]);
}

float GeluTanh(float x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return static_cast<float>(0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * double{x} * x * x))));
}

}  // namespace

GptSampler::GptSampler(const ModelConfig& m, std::vector<float> master)
    : m_(m),
      w_(std::move(master)),
      k_cache_(static_cast<size_t>(int64_t{m.n_layer} * m.block_size * m.n_embd)),
      v_cache_(k_cache_.size()) {}

Result<GptSampler> GptSampler::Create(const ModelConfig& m, std::vector<float> master) {
  const gpt_detail::Layout L(m);
  if (master.size() != static_cast<size_t>(L.total)) {
    return Status::InvalidArgument(StrCat("generate: the weights have ", master.size(),
                                          " values, a ", m.n_layer, " x ", m.n_embd, " model has ",
                                          L.total));
  }
  return GptSampler(m, std::move(master));
}

Result<std::vector<float>> GptSampler::Feed(int32_t token) {
  using namespace gpt_detail;  // NOLINT: the layout's parameter names
  const int64_t C = m_.n_embd, NH = m_.n_head, HS = C / NH, T = m_.block_size;
  // llama: KV key/value heads (query head h reads h / G), SwiGLU over F; gpt2: KV = NH.
  const int64_t KV = m_.kv_heads(), G = NH / KV, KD = KV * HS, F = m_.ffn();
  const bool llama = m_.llama();
  if (pos_ >= T) {
    return Status::InvalidArgument(StrCat("generate: the context is full (", T, " positions)"));
  }
  if (token < 0 || token >= m_.vocab_size) {
    return Status::InvalidArgument(
        StrCat("generate: token ", token, " is outside the vocabulary (", m_.vocab_size, ")"));
  }
  const Layout L(m_);
  const float* w = w_.data();
  std::vector<float> x(C), h(C), qkv(C + 2 * KD), y(C), o(C), f((llama ? 2 : 1) * F);
  for (int64_t i = 0; i < C; ++i) {
    x[i] = w[L.offset[kWte] + token * C + i] + (llama ? 0.0f : w[L.offset[kWpe] + pos_ * C + i]);
  }
  // The norms: RMSNorm (llama) or LayerNorm, weight w and bias b (gpt2) of C values.
  auto norm = [&](const float* in, int p_w, int p_b, int64_t l, float* out) {
    if (llama) return RmsNorm(in, w + L.offset[p_w] + l * C, C, out);
    LayerNorm(in, w + L.offset[p_w] + l * C, w + L.offset[p_b] + l * C, C, out);
  };
  // A bias of the layout, or none (llama has none).
  auto bias = [&](int p, int64_t off) { return L.size[p] == 0 ? nullptr : w + L.offset[p] + off; };
  const double inv_sqrt = 1.0 / std::sqrt(static_cast<double>(HS));
  std::vector<double> score(static_cast<size_t>(pos_ + 1));
  for (int64_t l = 0; l < m_.n_layer; ++l) {
    norm(x.data(), kLn1W, kLn1B, l, h.data());
    const int64_t rows = C + 2 * KD;
    MatVec(w + L.offset[kQkvW] + l * rows * C, bias(kQkvB, l * rows), h.data(), rows, C,
           qkv.data());
    if (llama) {  // rotary embeddings of this position on the query and key heads
      FP8RT_RETURN_IF_ERROR(
          cpu::RopeForward(qkv.data(), qkv.data(), 1, 1, NH, HS, rows, m_.rope_theta, pos_));
      FP8RT_RETURN_IF_ERROR(cpu::RopeForward(qkv.data() + C, qkv.data() + C, 1, 1, KV, HS, rows,
                                             m_.rope_theta, pos_));
    }
    float* kc = k_cache_.data() + (l * T) * KD;
    float* vc = v_cache_.data() + (l * T) * KD;
    std::copy_n(qkv.data() + C, KD, kc + pos_ * KD);
    std::copy_n(qkv.data() + C + KD, KD, vc + pos_ * KD);
    for (int64_t hd = 0; hd < NH; ++hd) {
      const float* q = qkv.data() + hd * HS;
      const int64_t kv = (hd / G) * HS;  // this query head's key/value head
      double mx = -INFINITY;
      for (int64_t j = 0; j <= pos_; ++j) {
        double s = 0;
        for (int64_t i = 0; i < HS; ++i) s += double{q[i]} * kc[j * KD + kv + i];
        score[j] = s * inv_sqrt;
        mx = std::max(mx, score[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= pos_; ++j) sum += (score[j] = std::exp(score[j] - mx));
      for (int64_t i = 0; i < HS; ++i) {
        double acc = 0;
        for (int64_t j = 0; j <= pos_; ++j) acc += score[j] * vc[j * KD + kv + i];
        y[hd * HS + i] = static_cast<float>(acc / sum);
      }
    }
    MatVec(w + L.offset[kAttProjW] + l * C * C, bias(kAttProjB, l * C), y.data(), C, C, o.data());
    for (int64_t i = 0; i < C; ++i) x[i] += o[i];
    norm(x.data(), kLn2W, kLn2B, l, h.data());
    const int64_t fc_rows = static_cast<int64_t>(f.size());
    MatVec(w + L.offset[kFcW] + l * fc_rows * C, bias(kFcB, l * F), h.data(), fc_rows, C, f.data());
    if (llama) {  // SwiGLU: silu(gate) * up, into the first F values
      for (int64_t i = 0; i < F; ++i) {
        const double g = f[i];
        f[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * f[F + i]);
      }
    } else {
      for (float& v : f) v = GeluTanh(v);
    }
    MatVec(w + L.offset[kFcProjW] + l * F * C, bias(kFcProjB, l * C), f.data(), C, F, o.data());
    for (int64_t i = 0; i < C; ++i) x[i] += o[i];
  }
  norm(x.data(), kLnfW, kLnfB, 0, h.data());
  std::vector<float> logits(static_cast<size_t>(m_.vocab_size));
  MatVec(w + L.offset[WeightOf(m_, kLmHead)], nullptr, h.data(), m_.vocab_size, C, logits.data());
  ++pos_;
  return logits;
}

int32_t SampleToken(const std::vector<float>& logits, const SampleOptions& o, SplitMix64& rng) {
  const int64_t V = static_cast<int64_t>(logits.size());
  if (o.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end(),
                                                 [](float a, float b) {
                                                   return (std::isnan(a) ? -INFINITY : a) <
                                                          (std::isnan(b) ? -INFINITY : b);
                                                 }) -
                                logits.begin());
  }
  std::vector<int32_t> ids(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) ids[i] = static_cast<int32_t>(i);
  // NaN sorts last (a strict weak order), and is never drawn: its weight is exp(-inf) = 0.
  auto value = [&](int32_t i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  int64_t k = o.top_k > 0 ? std::min<int64_t>(o.top_k, V) : V;
  // The k most likely first (ties by id, so the order never depends on the sort).
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return value(a) != value(b) ? value(a) > value(b) : a < b;
  });
  std::vector<double> p(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    sum += (p[i] = std::exp((double{value(ids[i])} - value(ids[0])) / o.temperature));
  }
  double u = rng.Uniform() * sum;
  for (int64_t i = 0; i < k; ++i) {
    if ((u -= p[i]) < 0) return ids[i];
  }
  return ids[k - 1];
}

Result<std::vector<int32_t>> Generate(const ModelConfig& m, std::vector<float> master,
                                      const std::vector<int32_t>& prompt, const SampleOptions& o) {
  if (prompt.empty()) return Status::InvalidArgument("generate: the prompt has no tokens");
  if (static_cast<int64_t>(prompt.size()) > m.block_size) {
    return Status::InvalidArgument(StrCat("generate: the prompt has ", prompt.size(),
                                          " tokens, the model's context ", m.block_size));
  }
  if (o.max_new_tokens < 0 || o.top_k < 0 || !(o.temperature >= 0.0f)) {
    return Status::InvalidArgument(StrCat("generate: max_new_tokens ", o.max_new_tokens, ", top_k ",
                                          o.top_k, ", temperature ", o.temperature,
                                          ": each must be >= 0"));
  }
  FP8RT_ASSIGN_OR_RETURN(GptSampler s, GptSampler::Create(m, std::move(master)));
  std::vector<float> logits;
  for (int32_t t : prompt) {
    FP8RT_ASSIGN_OR_RETURN(logits, s.Feed(t));
  }
  SplitMix64 rng(o.seed);
  std::vector<int32_t> all(prompt), out;
  while (static_cast<int>(out.size()) < o.max_new_tokens) {
    for (float v : logits) {
      if (!std::isfinite(v)) {
        return Status::NonFinite(StrCat("generate: the model's logits are not finite after ",
                                        all.size(), " tokens (a diverged model?)"));
      }
    }
    out.push_back(SampleToken(logits, o, rng));
    all.push_back(out.back());
    if (static_cast<int>(out.size()) == o.max_new_tokens) break;
    if (s.position() >= m.block_size) {
      // The context is full: start again from the last half of the text (positions are
      // absolute, so the cache cannot just slide).
      s.Reset();
      const int64_t keep = std::max<int64_t>(1, m.block_size / 2);
      for (size_t i = all.size() - keep; i + 1 < all.size(); ++i) {
        FP8RT_ASSIGN_OR_RETURN(logits, s.Feed(all[i]));
      }
    }
    FP8RT_ASSIGN_OR_RETURN(logits, s.Feed(out.back()));
  }
  return out;
}

Result<std::vector<int32_t>> PromptTokens(const Tokenizer& tokenizer, const std::string& prompt) {
  if (prompt.empty() && tokenizer.eos_id() >= 0) return std::vector<int32_t>{tokenizer.eos_id()};
  return tokenizer.Encode(prompt.empty() ? std::string("\n") : prompt);
}

Status GenerateFromCheckpoint(const std::string& checkpoint_dir, int64_t step,
                              const std::string& prompt, const SampleOptions& o,
                              const Tokenizer& tokenizer, std::ostream& out) {
  FP8RT_ASSIGN_OR_RETURN(const Checkpoint ck, ReadCheckpoint(checkpoint_dir, step, {}));
  FP8RT_ASSIGN_OR_RETURN(const ModelConfig m, CheckpointModelConfig(ck));
  FP8RT_ASSIGN_OR_RETURN(std::vector<float> master, CheckpointArray(ck, "master"));
  if (tokenizer.vocab_size() > m.vocab_size) {
    return Status::InvalidArgument(StrCat("tokenizer '", tokenizer.name(), "' has ",
                                          tokenizer.vocab_size(), " pieces, more than the model's ",
                                          m.vocab_size, " (model.vocab_size): not its tokenizer"));
  }
  FP8RT_ASSIGN_OR_RETURN(const std::vector<int32_t> start, PromptTokens(tokenizer, prompt));
  FP8RT_ASSIGN_OR_RETURN(const std::vector<int32_t> next, Generate(m, std::move(master), start, o));
  out << (prompt.empty() && tokenizer.is_bytes() ? std::string("\n") : prompt)
      << tokenizer.Decode(next) << "\n";
  return Status::Ok();
}

}  // namespace fp8rt
