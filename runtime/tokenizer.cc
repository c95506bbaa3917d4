// The byte-level and SentencePiece tokenizers (runtime/tokenizer.h).
#include "runtime/tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/read_file.h"

namespace fp8rt {

// A SentencePiece model is a few MiB (a 128K vocabulary: ~3 MiB); the metadata file is small.
constexpr size_t kMaxModelBytes = size_t{256} << 20;
constexpr size_t kMaxMetaBytes = size_t{64} << 20;

Tokenizer Tokenizer::Bytes() { return Tokenizer(); }

Result<Tokenizer> Tokenizer::FromModel(const std::string& serialized, const std::string& name) {
  auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
  const auto s = sp->LoadFromSerializedProto(serialized);
  if (!s.ok()) {
    return Status::InvalidArgument(
        StrCat("tokenizer '", name, "' is not a SentencePiece model: ", s.ToString()));
  }
  Tokenizer t;
  t.sp_ = std::move(sp);
  t.name_ = name;
  return t;
}

Result<Tokenizer> Tokenizer::Load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string model_path = path;
  if (fs::path(path).extension() == ".json") {
    FP8RT_ASSIGN_OR_RETURN(const std::string text,
                           ReadRegularFile(path, "dataset metadata", {.max_bytes = kMaxMetaBytes}));
    const auto meta = nlohmann::json::parse(text, nullptr, false);
    if (!meta.is_object() || !meta.contains("tokenizer") || !meta["tokenizer"].is_object() ||
        !meta["tokenizer"].contains("model") || !meta["tokenizer"]["model"].is_string()) {
      return Status::InvalidArgument(
          StrCat("dataset metadata '", path, "' names no tokenizer model (tokenizer.model)"));
    }
    // The model lies beside the metadata under one name (what input confinement checks).
    const std::string model = meta["tokenizer"]["model"].get<std::string>();
    if (model == "bytes") return Bytes();
    if (model != "tokenizer.model") {
      return Status::InvalidArgument(StrCat("dataset metadata '", path, "': tokenizer.model is '",
                                            model, "', not tokenizer.model or bytes"));
    }
    model_path = (fs::path(path).parent_path() / model).string();
  }
  FP8RT_ASSIGN_OR_RETURN(const std::string bytes, ReadRegularFile(model_path, "tokenizer model",
                                                                  {.max_bytes = kMaxModelBytes}));
  return FromModel(bytes, fs::path(model_path).filename().string());
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> out;
  if (sp_ == nullptr) {
    out.reserve(text.size());
    for (unsigned char c : text) out.push_back(c);
    return out;
  }
  std::vector<int> ids;
  const auto s = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  if (!s.ok()) return Status::InvalidArgument(StrCat("tokenizer '", name_, "': ", s.ToString()));
  out.assign(ids.begin(), ids.end());
  return out;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string s;
  if (sp_ == nullptr) {
    for (int32_t t : ids) {
      if (t >= 0 && t < 256) {
        s += static_cast<char>(t);
      } else {
        s += StrCat("<", t, ">");
      }
    }
    return s;
  }
  // Ids the model does not have (a model larger than its tokenizer samples the padding only if
  // vocab_size exceeds it) are written as <id>; the rest decoded in runs.
  std::vector<int> run;
  auto flush = [&] {
    std::string piece;
    if (!run.empty() && sp_->Decode(run, &piece).ok()) s += piece;
    run.clear();
  };
  const int n = sp_->GetPieceSize();
  for (int32_t t : ids) {
    if (t >= 0 && t < n) {
      run.push_back(t);
    } else {
      flush();
      s += StrCat("<", t, ">");
    }
  }
  flush();
  return s;
}

int Tokenizer::vocab_size() const { return sp_ == nullptr ? 256 : sp_->GetPieceSize(); }

int Tokenizer::eos_id() const { return sp_ == nullptr ? -1 : sp_->eos_id(); }

std::string Tokenizer::serialized() const {
  return sp_ == nullptr ? std::string() : std::string(sp_->serialized_model_proto());
}

}  // namespace fp8rt
