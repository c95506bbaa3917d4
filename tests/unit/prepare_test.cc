// fp8data's work (runtime/prepare.h) and the tokenizers (runtime/tokenizer.h), with Debian's
// SentencePiece: a model trained on English, text and JSONL tokenized into shards with a
// validation split, the output up to date or redone, every shard checked, samples decoded.
#include "runtime/prepare.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/input_paths.h"
#include "runtime/data.h"
#include "runtime/generate.h"
#include "runtime/tokenizer.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

namespace fs = std::filesystem;

bool Has(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class Prepare : public ::testing::Test {
 protected:
  void SetUp() override {
    english_ = test::EnglishCorpus(dir_.str() + "/english.txt");
    ASSERT_FALSE(english_.empty());
    // A JSONL file of documents with the same kind of text.
    std::ifstream in(english_, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream j(dir_.str() + "/docs.jsonl");
    for (size_t at = 0; at + 2000 < all.size() && at < 200000; at += 2000) {
      j << nlohmann::json({{"id", at}, {"text", all.substr(at, 2000)}}).dump() << "\n";
    }
    j.close();
    model_ = dir_.str() + "/tok/english.model";
    TokenizerTrainOptions t;
    t.inputs.files = {english_};
    t.out = model_;
    t.vocab_size = 1000;
    std::ostringstream log;
    const Status s = TrainTokenizer(t, log);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(Has(log.str(), "trained a bpe tokenizer of 1000 pieces")) << log.str();
  }
  TokenizeOptions Options(const std::string& out) {
    TokenizeOptions o;
    o.inputs.files = {english_, dir_.str() + "/docs.jsonl"};
    o.tokenizer = model_;
    o.out = dir_.str() + "/" + out;
    o.block_bytes = 16384;
    o.val_every = 10;
    o.shard_tokens = 50000;
    return o;
  }
  test::TempDir dir_;
  std::string english_, model_;
};

TEST_F(Prepare, ATrainedModelEncodesAndDecodesTextAsWritten) {
  auto tok = Tokenizer::Load(model_);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->vocab_size(), 1000);
  EXPECT_GE(tok->eos_id(), 0);
  const std::string text =
      "The quick brown fox,\n  jumps over 12345 lazy dogs: \xc3\xa9t\xc3\xa9!\t";
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok());
  EXPECT_LT(ids->size(), text.size()) << "pieces longer than a byte";
  EXPECT_EQ(tok->Decode(*ids), text) << "spaces, newlines, tabs, digits and UTF-8 come back";
  std::vector<int32_t> with_unknown = *ids;
  with_unknown.push_back(5000);
  EXPECT_TRUE(Has(tok->Decode(with_unknown), "<5000>")) << "an id past the model, shown as such";
  EXPECT_EQ(Tokenizer::Bytes().Decode({72, 105, 300}), "Hi<300>");
  // A unigram model round-trips the same text.
  TokenizerTrainOptions u;
  u.inputs.files = {english_};
  u.out = dir_.str() + "/tok/unigram.model";
  u.vocab_size = 800;
  u.type = "unigram";
  std::ostringstream log;
  ASSERT_TRUE(TrainTokenizer(u, log).ok()) << log.str();
  auto uni = Tokenizer::Load(u.out);
  ASSERT_TRUE(uni.ok()) << uni.status().ToString();
  EXPECT_EQ(uni->vocab_size(), 800);
  auto uids = uni->Encode(text);
  ASSERT_TRUE(uids.ok());
  EXPECT_EQ(uni->Decode(*uids), text);
  std::ofstream(dir_.str() + "/not.model") << "not a model";
  auto bad = Tokenizer::Load(dir_.str() + "/not.model");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(Has(bad.status().message(), "is not a SentencePiece model"));
}

TEST_F(Prepare, TokenizeWritesShardsAValidationSplitAndMetadataThenIsUpToDate) {
  const TokenizeOptions o = Options("out");
  std::vector<int64_t> seen;
  auto r = Tokenize(o, [&](int64_t done, int64_t total, int64_t) {
    seen.push_back(done);
    EXPECT_LE(done, total);
  });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->up_to_date);
  EXPECT_EQ(r->id_bytes, 2);
  EXPECT_GT(r->val_tokens, 0);
  EXPECT_GT(r->train_shards, 1) << "shards of 50000 tokens";
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), r->input_bytes);
  const auto meta = ReadJson(o.out + "/fp8data.json");
  EXPECT_EQ(meta["tokenizer"]["model"], "tokenizer.model");
  EXPECT_EQ(meta["tokenizer"]["vocab_size"], 1000);
  EXPECT_EQ(meta["ids"], "uint16");
  EXPECT_EQ(meta["train"]["tokens"], r->train_tokens);
  // The shards read back as a dataset; every id below the vocabulary; documents end with EOS.
  auto train = TokenDataset::Load({o.out + "/train"}, "tokens", "data.train");
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  EXPECT_EQ(static_cast<int64_t>(train->size()), r->train_tokens);
  EXPECT_EQ(static_cast<int>(train->num_shards()), r->train_shards);
  ASSERT_TRUE(train->CheckIds(1000).ok());
  auto tok = Tokenizer::Load(o.out + "/fp8data.json");
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const auto ids = train->tokens();
  auto val = TokenDataset::Load({o.out + "/val"}, "tokens", "data.val");
  ASSERT_TRUE(val.ok());
  const auto val_ids = val->tokens();
  std::ifstream jsonl(dir_.str() + "/docs.jsonl");
  const auto documents =
      1 + std::count(std::istreambuf_iterator<char>(jsonl), std::istreambuf_iterator<char>(), '\n');
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok->eos_id()) +
                std::count(val_ids.begin(), val_ids.end(), tok->eos_id()),
            documents)
      << "one end-of-document id per document: the text file and each JSONL line";
  // The first block is the text file's start, decoded as written.
  std::ifstream in(english_, std::ios::binary);
  std::string head(200, '\0');
  in.read(head.data(), 200);
  const std::string decoded = tok->Decode(std::vector<int32_t>(ids.begin(), ids.begin() + 100));
  EXPECT_EQ(head.substr(0, 40), decoded.substr(0, 40));

  // Again: up to date, nothing written. An input changed: redone.
  const auto before = fs::last_write_time(o.out + "/train/shard_000000.bin");
  auto again = Tokenize(o, {});
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->up_to_date);
  EXPECT_EQ(again->train_tokens, r->train_tokens);
  EXPECT_EQ(fs::last_write_time(o.out + "/train/shard_000000.bin"), before);
  std::ofstream(dir_.str() + "/docs.jsonl", std::ios::app)
      << nlohmann::json({{"text", "One more document."}}).dump() << "\n";
  auto redone = Tokenize(o, {});
  ASSERT_TRUE(redone.ok());
  EXPECT_FALSE(redone->up_to_date);
  EXPECT_GT(redone->train_tokens + redone->val_tokens, r->train_tokens + r->val_tokens);
  // A shard cut short: no longer up to date.
  fs::resize_file(o.out + "/train/shard_000000.bin", 2048);
  EXPECT_FALSE(Tokenize(o, {})->up_to_date);
  // Verify: every shard, against the metadata.
  std::ostringstream log;
  ASSERT_TRUE(VerifyShards({o.out}, 0, log).ok());
  EXPECT_TRUE(Has(log.str(), "/train: ")) << log.str();
  EXPECT_TRUE(Has(log.str(), "(vocabulary 1000): ok")) << log.str();
  const Status small = VerifyShards({o.out}, 500, log);
  ASSERT_FALSE(small.ok());
  EXPECT_TRUE(Has(small.message(), "not below model.vocab_size 500")) << small.message();
  EXPECT_TRUE(Has(small.message(), "shard_000000.bin' at token ")) << small.message();
}

TEST_F(Prepare, BadInputsAreNamed) {
  TokenizeOptions o = Options("bad");
  std::ofstream(dir_.str() + "/broken.jsonl") << "{\"text\": \"fine\"}\n{\"body\": \"no text\"}\n";
  o.inputs.files = {dir_.str() + "/broken.jsonl"};
  auto r = Tokenize(o, {});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(Has(r.status().message(), "broken.jsonl' line 2: not a JSON object with a string"))
      << r.status().message();
  o.inputs.files = {dir_.str() + "/missing.txt"};
  EXPECT_TRUE(Has(Tokenize(o, {}).status().message(), "missing.txt': No such file"));
  o.inputs.files = {dir_.str()};
  EXPECT_TRUE(Has(Tokenize(o, {}).status().message(), "is a directory; a regular file"));
  o.inputs.files = {english_};
  o.tokenizer = dir_.str() + "/missing.model";
  EXPECT_FALSE(Tokenize(o, {}).ok());
  TokenizerTrainOptions t;
  t.inputs.files = {english_};
  t.out = dir_.str() + "/x.model";
  t.type = "wordpiece";
  std::ostringstream log;
  EXPECT_TRUE(Has(TrainTokenizer(t, log).message(), "--type 'wordpiece' is not one of"));
}

// A byte-level tokenize needs no model; uint16 ids; the metadata says bytes.
TEST_F(Prepare, TheByteTokenizerNeedsNoModel) {
  TokenizeOptions o = Options("bytes");
  o.tokenizer = "bytes";
  o.inputs.files = {english_};
  auto r = Tokenize(o, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->vocab_size, 256);
  EXPECT_EQ(r->train_tokens + r->val_tokens, r->input_bytes) << "no end-of-document id";
  auto tok = Tokenizer::Load(o.out + "/fp8data.json");
  ASSERT_TRUE(tok.ok());
  EXPECT_TRUE(tok->is_bytes());
}

// fp8train decodes its samples with data.tokenizer; --generate with a tokenizer prints text.
TEST_F(Prepare, SamplesAndGenerateDecodeWithTheTokenizer) {
  const TokenizeOptions o = Options("run");
  ASSERT_TRUE(Tokenize(o, {}).ok());
  TrainOptions t;
  t.config = test::TinyRunConfig(o.out + "/train", Precision::kFp32, 6);
  t.config.data.format = "tokens";
  t.config.data.val = {o.out + "/val"};
  t.config.data.tokenizer = o.out + "/fp8data.json";
  t.config.model.vocab_size = 1000;
  t.config.train.sample_every = 6;
  t.config.train.sample_tokens = 20;
  t.config.train.eval_every = 6;
  t.checkpoint_dir = dir_.str() + "/ckpt";
  std::ostringstream progress;
  t.progress = &progress;
  auto r = RunTraining(t, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(Has(progress.str(), "sample: ")) << progress.str();
  EXPECT_FALSE(Has(progress.str(), "sample: <")) << "decoded, not ids: " << progress.str();
  auto tok = Tokenizer::Load(o.out + "/fp8data.json");
  ASSERT_TRUE(tok.ok());
  SampleOptions s;
  s.max_new_tokens = 10;
  std::ostringstream out;
  ASSERT_TRUE(GenerateFromCheckpoint(t.checkpoint_dir, -1, "The ", s, *tok, out).ok());
  EXPECT_EQ(out.str().rfind("The ", 0), 0u) << out.str();
  EXPECT_FALSE(Has(out.str(), "<")) << out.str();
  // A tokenizer with more pieces than the model: refused by name.
  t.config.model.vocab_size = 512;
  auto small = RunTraining(t, DeviceInfo{});
  ASSERT_FALSE(small.ok());
  EXPECT_TRUE(Has(small.status().message(), "not below model.vocab_size 512") ||
              Has(small.status().message(), "more than model.vocab_size 512"))
      << small.status().message();
  // Under fp8d the metadata and its model are confined as one.
  InputRules rules;
  rules.roots = {o.out};
  EXPECT_TRUE(
      ConfineInput("data.tokenizer", o.out + "/fp8data.json", InputKind::kTokenizer, rules).ok());
  fs::remove(o.out + "/tokenizer.model");
  fs::create_symlink(model_, o.out + "/tokenizer.model");
  auto out_of_root =
      ConfineInput("data.tokenizer", o.out + "/fp8data.json", InputKind::kTokenizer, rules);
  ASSERT_FALSE(out_of_root.ok());
  EXPECT_TRUE(Has(out_of_root.status().message(), "data.tokenizer (tokenizer.model)"))
      << out_of_root.status().message();
}

}  // namespace
}  // namespace fp8rt
