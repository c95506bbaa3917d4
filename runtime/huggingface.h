// Hugging Face in and out. Out (fp8train --export-hf): a checkpoint's master weights as
// model.safetensors and config.json that transformers loads as GPT2LMHeadModel with no conversion
// code. In (train.init_from): such a directory's weights start a run.
//
// The mapping (our flat layout, runtime/gpt_layout.h -> transformers' GPT-2 state dict):
//   wte (Vp, C)          -> transformer.wte.weight (V, C)   (the vocabulary padding dropped;
//                           lm_head.weight is tied to it, so not written)
//   wpe                  -> transformer.wpe.weight (block_size, C)
//   ln1/ln2 of layer i   -> transformer.h.i.ln_1 / ln_2 .weight, .bias
//   qkv (3C, C)          -> transformer.h.i.attn.c_attn.weight (C, 3C): GPT-2's Conv1D keeps
//                           (in, out), so every linear weight is transposed; Q, K, V in that
//                           order along the output, heads contiguous, as transformers splits them
//   attn_proj (C, C)     -> transformer.h.i.attn.c_proj.weight (C, C)
//   fc (4C, C)           -> transformer.h.i.mlp.c_fc.weight (C, 4C)
//   fc_proj (C, 4C)      -> transformer.h.i.mlp.c_proj.weight (4C, C)
//   lnf                  -> transformer.ln_f.weight, .bias
// config.json: model_type gpt2, activation_function gelu_new (our tanh GELU),
// layer_norm_epsilon 1e-5, tied embeddings, no dropout.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "runtime/config.h"
#include "runtime/safetensors.h"

namespace fp8rt {

// One tensor of transformers' GPT-2 and where it lives in our master array: rows x cols starting
// at `offset` (Layout order), transposed in the Hugging Face file when `transpose` (Conv1D).
struct Gpt2HfEntry {
  std::string name;  // with the "transformer." prefix of GPT2LMHeadModel
  int64_t offset, rows, cols;
  bool transpose;
  bool vector;  // a 1-D tensor (biases, LayerNorm weights): shape (cols)
  std::vector<int64_t> HfShape() const;
};
// Every tensor of GPT2LMHeadModel for model m (wte, wpe, per layer ln_1, c_attn, c_proj, ln_2,
// c_fc, c_proj, then ln_f), in that order.
std::vector<Gpt2HfEntry> Gpt2HfMap(const ModelConfig& m);

// The tensors transformers' GPT2LMHeadModel has, from a whole-model master array (Layout order).
Result<std::vector<SafetensorsOut>> Gpt2HfTensors(const ModelConfig& m,
                                                  const std::vector<float>& master);
// config.json's text for the model (torch_dtype float32 or bfloat16 per `dtype`, F32 or BF16).
std::string Gpt2HfConfig(const ModelConfig& m, const std::string& dtype);

// The whole-model master array (Layout order; the vocabulary padding zero) for model m from a
// Hugging Face GPT-2 directory: DIR/model.safetensors (F32, BF16 or F16), names with or without
// the "transformer." prefix (transformers writes it; the hub's gpt2 files have none), the
// attention-mask buffers of old files ignored, a tied lm_head.weight accepted. Refused, naming
// what differs: a missing tensor, a shape that is not this model's, any other tensor, an untied
// lm_head, or a config.json whose model_type or shape is not this model's. The token ids must
// mean what they meant in training: the hub's gpt2 weights expect GPT-2 BPE ids (data.format:
// tokens, llm.c's shards), not the bytes of data.format: text.
Result<std::vector<float>> Gpt2MasterFromHf(const ModelConfig& m, const std::string& dir);

// Reads the checkpoint in `checkpoint_dir` (LATEST, or `step` when >= 0; whole or sharded),
// and writes OUT_DIR/model.safetensors (dtype F32 or BF16) and OUT_DIR/config.json, each
// atomically (OUT_DIR created if missing). A checkpoint that is missing, corrupt or not a GPT-2
// shape is refused before anything is written.
Status ExportHuggingFace(const std::string& checkpoint_dir, int64_t step,
                         const std::string& out_dir, const std::string& dtype);

}  // namespace fp8rt
