// Tokenizers: the byte-level one (data.format text: every byte a token) and SentencePiece models
// (BPE or unigram; Debian's libsentencepiece), loaded from a .model file or from the metadata
// file fp8data writes beside its shards (fp8data.json, which names the model). Used by fp8data
// to write shards, and by fp8train to turn samples back into text (data.tokenizer,
// --generate --tokenizer).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace fp8rt {

// fp8data's metadata file, beside the shards it wrote.
inline constexpr char kDatasetMetaName[] = "fp8data.json";

class Tokenizer {
 public:
  // Every byte one token (ids 0..255); decoding writes ids past 255 as <id>.
  static Tokenizer Bytes();
  // A SentencePiece model (a .model file), or an fp8data.json naming one (its "tokenizer.model",
  // relative to the metadata file's directory). Files are read whole (regular files only).
  static Result<Tokenizer> Load(const std::string& path);
  // A serialized SentencePiece model.
  static Result<Tokenizer> FromModel(const std::string& serialized, const std::string& name);

  Result<std::vector<int32_t>> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;
  int vocab_size() const;
  // The end-of-document id, or -1 when the model has none (bytes: none).
  int eos_id() const;
  // "bytes", or the model's file name.
  const std::string& name() const { return name_; }
  bool is_bytes() const { return sp_ == nullptr; }
  // The serialized model ("" for bytes).
  std::string serialized() const;

 private:
  std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_;
  std::string name_ = "bytes";
};

}  // namespace fp8rt
