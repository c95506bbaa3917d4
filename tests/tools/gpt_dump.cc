// fp8rt_gpt_dump: initialises a small model, runs forward + backward on a fixed batch and writes
// the weights, batch, loss, logits and gradients, for scripts/torch_check.py (gpt2) to compare
// against an independent PyTorch implementation of the same model; and the same weights as Hugging
// Face GPT-2 / Llama (DIR/hf, DIR/hf-bf16: model.safetensors + config.json,
// runtime/huggingface.h) for scripts/hf_check.py (gpt2) and scripts/llama_check.py (llama, which
// also compares the gradients) to load with transformers.
// Usage: fp8rt_gpt_dump --out DIR [--arch gpt2|llama] [--device cpu|cuda:K]
//                       [--precision fp32|bf16|fp8]
#include <filesystem>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/atomic_file.h"
#include "runtime/device.h"
#include "runtime/gpt.h"
#include "runtime/huggingface.h"

namespace {

void Write(const std::string& path, const void* p, size_t bytes) {
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(p), bytes);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fp8rt;
  CLI::App app{"fp8rt_gpt_dump"};
  std::string out, device = "cpu", precision = "fp32", arch = "gpt2";
  app.add_option("--out", out)->required();
  app.add_option("--arch", arch)->check(CLI::IsMember({"gpt2", "llama"}));
  app.add_option("--device", device);
  app.add_option("--precision", precision)->check(CLI::IsMember({"fp32", "bf16", "fp8"}));
  CLI11_PARSE(app, argc, argv);

  ModelOptions o;
  o.model = {2, 128, 4, 64, 50257};  // V padded to 50304: exercises the padding
  if (arch == "llama") {  // grouped-query (2 query heads per key/value head), F not 4C
    o.model.arch = Arch::kLlama;
    o.model.n_kv_head = 2, o.model.ffn_hidden = 352, o.model.rope_theta = 500000.0f;
  }
  o.precision = *ParsePrecision(precision);
  o.B = 4, o.T = 64;
  auto dev = QueryDevice(device);
  if (!dev.ok()) {
    std::cerr << dev.status().ToString() << "\n";
    return 2;
  }
  auto model = dev->is_cpu ? CreateCpuGpt(o) : CreateCudaGpt(o, dev->ordinal);
  if (!model.ok()) {
    std::cerr << model.status().ToString() << "\n";
    return 1;
  }
  GptModel& g = **model;
  if (!g.InitRandom(1234).ok()) return 1;
  const int64_t M = int64_t{o.B} * o.T;
  std::vector<int32_t> x(M), y(M);
  for (int64_t i = 0; i < M; ++i) {
    x[i] = static_cast<int32_t>((i * 7919 + 13) % o.model.vocab_size);
    y[i] = static_cast<int32_t>((i * 104729 + 7) % o.model.vocab_size);
  }
  float loss = 0, loss2 = 0;
  std::vector<float> logits, grads, master, m, v;
  Status s = g.Forward(x.data(), y.data(), &loss, &logits);
  if (s.ok()) s = g.Gradients(x.data(), y.data(), &loss2, &grads);
  if (s.ok()) s = g.ExportState(&master, &m, &v);
  if (!s.ok()) {
    std::cerr << s.ToString() << "\n";
    return 1;
  }
  nlohmann::json meta = {{"arch", arch}, {"n_kv_head", o.model.kv_heads()},
                         {"head_dim", o.model.head_size()}, {"ffn_hidden", o.model.ffn()},
                         {"rope_theta", o.model.rope_theta}, {"norm_eps", 1e-5},
                         {"n_layer", o.model.n_layer}, {"n_embd", o.model.n_embd},
                         {"n_head", o.model.n_head},   {"block_size", o.model.block_size},
                         {"vocab_size", o.model.vocab_size}, {"padded_vocab", o.model.padded_vocab()},
                         {"B", o.B}, {"T", o.T}, {"loss", loss}, {"precision", precision},
                         {"device", dev->name}};
  nlohmann::json tensors = nlohmann::json::array();
  int64_t off = 0;
  for (const auto& [name, size] : g.ParamTensors()) {
    tensors.push_back({{"name", name}, {"offset", off}, {"size", size}});
    off += (size + 63) / 64 * 64;
  }
  meta["tensors"] = tensors;
  std::ofstream(out + "/meta.json") << meta.dump(2);
  Write(out + "/params.bin", master.data(), master.size() * 4);
  Write(out + "/tokens.bin", x.data(), x.size() * 4);
  Write(out + "/targets.bin", y.data(), y.size() * 4);
  Write(out + "/logits.bin", logits.data(), logits.size() * 4);
  Write(out + "/grads.bin", grads.data(), grads.size() * 4);
  auto hf = HfTensors(o.model, master);
  if (!hf.ok()) {
    std::cerr << hf.status().ToString() << "\n";
    return 1;
  }
  for (const std::string dtype : {"F32", "BF16"}) {
    const std::string dir = out + (dtype == "F32" ? "/hf" : "/hf-bf16");
    std::filesystem::create_directories(dir);
    s = WriteSafetensors(dir + "/model.safetensors", *hf, dtype, {{"format", "pt"}});
    if (s.ok()) s = WriteFileAtomic(dir + "/config.json", HfConfig(o.model, dtype));
    if (!s.ok()) {
      std::cerr << s.ToString() << "\n";
      return 1;
    }
  }
  std::cout << "wrote " << out << ": loss " << loss << "\n";
  return 0;
}
