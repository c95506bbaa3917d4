// Hugging Face in and out. Out (fp8train --export-hf): a checkpoint's master weights as
// model.safetensors and config.json that transformers loads as GPT2LMHeadModel (model.arch gpt2)
// or LlamaForCausalLM (llama) with no conversion code. In (train.init_from): such a directory's
// weights start a run.
//
// llama (nn.Linear keeps (out, in), as we do: nothing transposed):
//   wte (Vp, C)          -> model.embed_tokens.weight (V, C)
//   ln1 / ln2 of layer i -> model.layers.i.input_layernorm / post_attention_layernorm .weight
//   qkv (Q + 2KV, C)     -> model.layers.i.self_attn.q_proj / k_proj / v_proj .weight, its row
//                           blocks (RoPE is transformers' rotate_half on them: no permutation)
//   attn_proj (C, Q)     -> model.layers.i.self_attn.o_proj.weight
//   fc (2F, C)           -> model.layers.i.mlp.gate_proj / up_proj .weight, its two row blocks
//   fc_proj (C, F)       -> model.layers.i.mlp.down_proj.weight
//   lnf, lm_head (Vp, C) -> model.norm.weight, lm_head.weight (V, C)
// config.json: model_type llama, hidden_act silu, rms_norm_eps 1e-5, rope_theta, untied
// embeddings, no biases.
//
// gpt2 (our flat layout, runtime/gpt_layout.h -> transformers' GPT-2 state dict):
//   wte (Vp, C)          -> transformer.wte.weight (V, C)   (the vocabulary padding dropped;
//                           lm_head.weight is tied to it, so not written)
//   wpe                  -> transformer.wpe.weight (block_size, C)
//   ln1/ln2 of layer i   -> transformer.h.i.ln_1 / ln_2 .weight, .bias
//   qkv (3C, C)          -> transformer.h.i.attn.c_attn.weight (C, 3C): GPT-2's Conv1D keeps
//                           (in, out), so every linear weight is transposed; Q, K, V in that
//                           order along the output, heads contiguous, as transformers splits them
//   attn_proj (C, C)     -> transformer.h.i.attn.c_proj.weight (C, C)
//   fc (F, C)            -> transformer.h.i.mlp.c_fc.weight (C, F)   (F = 4C unless ffn_hidden)
//   fc_proj (C, F)       -> transformer.h.i.mlp.c_proj.weight (F, C)
//   lnf                  -> transformer.ln_f.weight, .bias
// config.json: model_type gpt2, activation_function gelu_new (our tanh GELU),
// layer_norm_epsilon 1e-5, tied embeddings, no dropout.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "common/train_config.h"
#include "runtime/safetensors.h"

namespace fp8rt {

// One tensor of transformers' model and where it lives in our master array: rows x cols starting
// at `offset` (Layout order), transposed in the Hugging Face file when `transpose` (GPT-2's
// Conv1D).
struct HfEntry {
  std::string name;  // GPT2LMHeadModel's with its "transformer." prefix, LlamaForCausalLM's
  int64_t offset, rows, cols;
  bool transpose;
  bool vector;  // a 1-D tensor (biases, LayerNorm weights): shape (cols)
  std::vector<int64_t> HfShape() const;
};
// Every tensor of GPT2LMHeadModel (wte, wpe, per layer ln_1, c_attn, c_proj, ln_2, c_fc, c_proj,
// then ln_f) or LlamaForCausalLM (embed_tokens, per layer input_layernorm, q/k/v/o_proj,
// post_attention_layernorm, gate/up/down_proj, then norm, lm_head) for model m, in that order.
std::vector<HfEntry> HfMap(const ModelConfig& m);

// The tensors transformers' model has, from a whole-model master array (Layout order).
Result<std::vector<SafetensorsOut>> HfTensors(const ModelConfig& m,
                                              const std::vector<float>& master);
// config.json's text for the model (torch_dtype float32 or bfloat16 per `dtype`, F32 or BF16).
std::string HfConfig(const ModelConfig& m, const std::string& dtype);

// The whole-model master array (Layout order; the vocabulary padding zero) for model m from a
// Hugging Face directory of the model's arch: DIR/model.safetensors (F32, BF16 or F16); GPT-2
// names with or without the "transformer." prefix (transformers writes it; the hub's gpt2 files
// have none), the attention-mask buffers of old files ignored, a tied lm_head.weight accepted
// (llama: its own lm_head.weight required, old rotary_emb.inv_freq buffers ignored). Refused, naming
// what differs: a missing tensor, a shape that is not this model's, any other tensor, an untied
// lm_head, or a config.json whose model_type or shape is not this model's. The token ids must
// mean what they meant in training: the hub's gpt2 weights expect GPT-2 BPE ids (data.format:
// tokens, llm.c's shards), not the bytes of data.format: text.
Result<std::vector<float>> MasterFromHf(const ModelConfig& m, const std::string& dir);

// Reads the checkpoint in `checkpoint_dir` (LATEST, or `step` when >= 0; whole or sharded),
// and writes OUT_DIR/model.safetensors (dtype F32 or BF16) and OUT_DIR/config.json, each
// atomically (OUT_DIR created if missing). A checkpoint that is missing, corrupt or not a model
// shape is refused before anything is written.
Status ExportHuggingFace(const std::string& checkpoint_dir, int64_t step,
                         const std::string& out_dir, const std::string& dtype);

}  // namespace fp8rt
