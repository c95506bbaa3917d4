// Corpus loading and the deterministic sampler.
#include "runtime/data.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "runtime/trainer.h"
#include "tests/common/megatron_writer.h"
#include "tests/common/train_helpers.h"

namespace fp8rt {
namespace {

using test::MegatronWriter;

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "." + std::to_string(::getpid())))
      .string();
}

TEST(TokenDataset, ShardRoundTripAndCorruption) {
  const std::string p = TempPath("shard.bin");
  std::vector<int32_t> toks = {1, 2, 3, 50256, 7};
  ASSERT_TRUE(TokenDataset::WriteShard(p, toks).ok());
  auto d = TokenDataset::LoadShard(p);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tokens(), toks);
  // Truncate: the header promises more tokens than the file holds.
  std::filesystem::resize_file(p, 1024 + 4);
  auto bad = TokenDataset::LoadShard(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fewer"), std::string::npos);
  {
    std::ofstream o(p, std::ios::binary | std::ios::trunc);
    o << "not a shard at all, just text";
  }
  EXPECT_FALSE(TokenDataset::LoadShard(p).ok());
  std::filesystem::remove(p);
}

// Ids above 65,535 (Llama-3's 128,256-id vocabulary) travel in llm.c's uint32 shard (magic
// 20240801, version 7); ids that fit uint16 in its GPT-2 shard unless uint32 is asked for. A
// magic with another format's version, or ids the width cannot hold, are refused by name.
TEST(TokenDataset, Uint32ShardsCarryLargeVocabulariesAndEachHeaderIsChecked) {
  const std::string p = TempPath("wide.bin");
  const std::vector<int32_t> ids = {128000, 5, 65535, 65536, 128255, 9};
  ASSERT_TRUE(TokenDataset::WriteShard(p, ids).ok());
  int32_t header[3];
  {
    std::ifstream in(p, std::ios::binary);
    in.read(reinterpret_cast<char*>(header), sizeof header);
  }
  EXPECT_EQ(header[0], 20240801);
  EXPECT_EQ(header[1], 7);
  EXPECT_EQ(header[2], 6);
  EXPECT_EQ(std::filesystem::file_size(p), 1024u + 6 * 4);
  auto d = TokenDataset::LoadShard(p);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tokens(), ids);
  EXPECT_EQ(*d->CheckIds(128256), 128255);
  EXPECT_FALSE(d->CheckIds(128255).ok());

  // Small ids: uint16 unless uint32 is asked for; uint16 refuses what it cannot hold.
  const std::vector<int32_t> small = {1, 2, 300, 65535};
  ASSERT_TRUE(TokenDataset::WriteShard(p, small).ok());
  EXPECT_EQ(std::filesystem::file_size(p), 1024u + 4 * 2);
  ASSERT_TRUE(TokenDataset::WriteShard(p, small, TokenDataset::ShardIds::kUint32).ok());
  EXPECT_EQ(std::filesystem::file_size(p), 1024u + 4 * 4);
  ASSERT_TRUE(TokenDataset::LoadShard(p).ok());
  EXPECT_EQ(TokenDataset::LoadShard(p)->tokens(), small);
  auto narrow = TokenDataset::WriteShard(p, ids, TokenDataset::ShardIds::kUint16);
  ASSERT_FALSE(narrow.ok());
  EXPECT_NE(narrow.message().find("does not fit uint16"), std::string::npos) << narrow.message();

  // Each magic with the other's version; a truncated uint32 shard.
  for (const auto& [magic, version] : {std::pair{20240801, 1}, std::pair{20240520, 7}}) {
    ASSERT_TRUE(TokenDataset::WriteShard(p, ids).ok());
    {
      std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
      const int32_t h[2] = {magic, version};
      f.write(reinterpret_cast<const char*>(h), sizeof h);
    }
    auto bad = TokenDataset::LoadShard(p);
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("but its version is not"), std::string::npos)
        << bad.status().message();
  }
  ASSERT_TRUE(TokenDataset::WriteShard(p, ids).ok());
  std::filesystem::resize_file(p, 1024 + 5 * 4 + 2);
  auto cut = TokenDataset::LoadShard(p);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("holds fewer"), std::string::npos);
  std::filesystem::remove(p);
}

// A Llama-shaped model with Llama-3's vocabulary (128,256) trains on a uint32 shard, and a model
// whose vocabulary is smaller than the shard's ids is refused naming both.
TEST(TokenDataset, ALlamaWithLlama3sVocabularyTrainsOnAUint32Shard) {
  test::TempDir dir("fp8rt_llama3_vocab");
  const std::string p = dir.str() + "/tokens.bin";
  std::vector<int32_t> ids;
  for (int i = 0; i < 4000; ++i) ids.push_back(i % 7 == 0 ? 128000 + i % 256 : (i * 7919) % 128256);
  ASSERT_TRUE(TokenDataset::WriteShard(p, ids).ok());
  TrainOptions o;
  o.config = test::TinyRunConfig(p, Precision::kFp32, 3);
  o.config.data.format = "tokens";
  o.config.model.arch = Arch::kLlama;
  o.config.model.n_layer = 1, o.config.model.n_embd = 32, o.config.model.n_head = 2;
  o.config.model.n_kv_head = 1, o.config.model.ffn_hidden = 64, o.config.model.block_size = 32;
  o.config.model.vocab_size = 128256;
  o.config.train.batch_size = 2, o.config.train.seq_len = 32;
  ASSERT_TRUE(o.config.Validate().ok()) << o.config.Validate().ToString();
  auto r = RunTraining(o, DeviceInfo{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->losses.size(), 3u);
  EXPECT_GT(r->losses.front(), 10.0) << "about ln(128256) = 11.76 at the start";
  o.config.model.vocab_size = 65536;
  auto small = RunTraining(o, DeviceInfo{});
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("not below model.vocab_size 65536"), std::string::npos)
      << small.status().message();
}

TEST(TokenDataset, MegatronIndexedDatasetsReadBackTheirSequencesInOrder) {
  test::TempDir dir("fp8rt_megatron");
  for (const auto& [code, width, big] :
       {std::tuple<uint8_t, size_t, int64_t>{8, 2, 50256}, {4, 4, 128255}, {1, 1, 255}}) {
    const std::string prefix = dir.str() + "/set_" + std::to_string(code);
    MegatronWriter w(code, width);
    w.Sequence({5, 6, 7, big});
    w.Sequence({8, 9});
    w.EndDocument();
    w.Sequence({big - 1, 0});
    w.EndDocument();
    w.Write(prefix);
    auto d = TokenDataset::Load(prefix, "megatron");
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->tokens(), (std::vector<int32_t>{5, 6, 7, static_cast<int32_t>(big), 8, 9,
                                                 static_cast<int32_t>(big - 1), 0}))
        << "dtype code " << int{code};
  }
  // A run reads one by its prefix (data.format: megatron).
  {
    const std::string corpus = test::EnglishCorpus(dir.str() + "/corpus.txt");
    std::ifstream in(corpus, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    MegatronWriter w(8, 2);
    for (size_t at = 0; at < text.size(); at += 1000) {  // documents of 1000 bytes
      std::vector<int64_t> ids;
      for (size_t i = at; i < std::min(text.size(), at + 1000); ++i) {
        ids.push_back(static_cast<uint8_t>(text[i]));
      }
      w.Sequence(ids);
      w.EndDocument();
    }
    w.Write(dir.str() + "/english_text_document");
    TrainOptions o;
    o.config = test::TinyRunConfig(dir.str() + "/english_text_document", Precision::kFp8, 3);
    o.config.data.format = "megatron";
    ASSERT_TRUE(o.config.Validate().ok());
    auto r = RunTraining(o, DeviceInfo{});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->losses.size(), 3u);
  }
  // Refusals, each naming the file and what is wrong.
  const std::string p = dir.str() + "/bad";
  auto refused = [&](const char* says) {
    auto r = TokenDataset::LoadMegatron(p);
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(p), std::string::npos) << r.status().message();
  };
  MegatronWriter good(8, 2);
  good.Sequence({1, 2, 3});
  good.EndDocument();
  good.Write(p, 2);
  refused("its version is not 1");
  MegatronWriter floats = good;
  floats.code = 7;
  floats.Write(p);
  refused("floating-point");
  good.Write(p);
  std::filesystem::resize_file(p + ".bin", 4);
  refused("lies past the end");
  good.Write(p);
  std::filesystem::resize_file(p + ".idx", 40);
  refused("shorter than its sequence and document counts");
  MegatronWriter backwards = good;
  backwards.docs = {0, 1, 0};
  backwards.Write(p);
  refused("document index is not 0, ..., 1 in order");
  { std::ofstream(p + ".idx", std::ios::binary) << "not an index at all, just text here"; }
  refused("not a Megatron-LM indexed dataset index");
}

// The ids stay in the file (mapped) in their own width and are widened as they are copied out;
// a Megatron dataset whose sequences are not in order in its .bin is copied instead, in the
// index's order.
TEST(TokenDataset, IdsStayInTheirFileAndAreWidenedAsTheyAreCopied) {
  test::TempDir dir("fp8rt_mapped");
  const std::string shard = dir.str() + "/s.bin", text = dir.str() + "/t.txt";
  std::vector<int32_t> ids;
  for (int i = 0; i < 1000; ++i) ids.push_back((i * 7919) % 60000);
  ASSERT_TRUE(TokenDataset::WriteShard(shard, ids).ok());
  std::ofstream(text) << "Hello, mapped world";
  auto s16 = TokenDataset::LoadShard(shard);
  auto t = TokenDataset::LoadText(text);
  ASSERT_TRUE(s16.ok() && t.ok());
  EXPECT_EQ(s16->owned_bytes(), 0u);
  EXPECT_EQ(t->owned_bytes(), 0u);
  EXPECT_EQ(s16->size(), 1000u);
  std::vector<int32_t> window(37);
  ASSERT_TRUE(s16->Copy(501, 37, window.data()).ok());
  EXPECT_EQ(window, std::vector<int32_t>(ids.begin() + 501, ids.begin() + 538));
  ASSERT_TRUE(t->Copy(7, 6, window.data()).ok());
  EXPECT_EQ(std::vector<int32_t>(window.begin(), window.begin() + 6),
            (std::vector<int32_t>{'m', 'a', 'p', 'p', 'e', 'd'}));
  EXPECT_EQ(TokenDataset::FromTokens(ids).owned_bytes(), 4000u);

  // Sequence 1 written before sequence 0 in the .bin.
  MegatronWriter w(8, 2);
  w.Sequence({10, 11});   // (as sequence 1)
  w.Sequence({1, 2, 3});  // (as sequence 0)
  std::swap(w.lengths[0], w.lengths[1]);
  std::swap(w.offsets[0], w.offsets[1]);
  w.EndDocument();
  w.Write(dir.str() + "/shuffled");
  auto m = TokenDataset::LoadMegatron(dir.str() + "/shuffled");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->tokens(), (std::vector<int32_t>{1, 2, 3, 10, 11}));
  EXPECT_EQ(m->owned_bytes(), 5u * 4);
}

// Sequences that lie over one another (more ids than the .bin holds) are refused, not copied.
TEST(TokenDataset, OverlappingMegatronSequencesAreRefused) {
  test::TempDir dir("fp8rt_overlap");
  MegatronWriter w(8, 2);
  w.Sequence({1, 2, 3});
  w.lengths.push_back(3);  // a second sequence over the first
  w.offsets.push_back(0);
  w.EndDocument();
  w.Write(dir.str() + "/over");
  auto r = TokenDataset::LoadMegatron(dir.str() + "/over");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("(they overlap)"), std::string::npos)
      << r.status().message();
}

// What a file holds is never echoed in a refusal (the message reaches the job's submitter), and a
// FIFO or a directory is refused at once, never waited on.
TEST(TokenDataset, RefusalsSayWhatAFileIsNotNeverWhatItHolds) {
  const std::string p = TempPath("secret.bin");
  {
    std::ofstream o(p, std::ios::binary | std::ios::trunc);
    o << "ABCD" << std::string(2000, 'x');  // "ABCD" read as the magic: 1145258561
  }
  auto bad = TokenDataset::LoadShard(p);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not an llm.c token shard"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(bad.status().message().find("1145258561"), std::string::npos)
      << "the file's first bytes are in the message: " << bad.status().message();
  std::filesystem::remove(p);
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const char* format : {"text", "tokens"}) {
    auto f = TokenDataset::Load(fifo, format);  // would block for a writer if it were opened so
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("is a FIFO; a regular file is required"),
              std::string::npos)
        << f.status().message();
  }
  std::filesystem::remove(fifo);
  auto dir = TokenDataset::Load(std::filesystem::temp_directory_path().string(), "text");
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("is a directory"), std::string::npos);
}

TEST(TokenDataset, TextIsBytes) {
  const std::string p = TempPath("text.txt");
  {
    std::ofstream o(p, std::ios::binary);
    o << "Hi\xc3\xa9";
  }
  auto d = TokenDataset::LoadText(p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->tokens(), (std::vector<int32_t>{'H', 'i', 0xc3, 0xa9}));
  std::filesystem::remove(p);
}

TEST(DataLoader, DeterministicAndResumable) {
  std::vector<int32_t> toks(1000);
  for (int i = 0; i < 1000; ++i) toks[i] = i;
  auto ds = TokenDataset::FromTokens(toks);
  DataLoader a(&ds, 3, 8, 42), b(&ds, 3, 8, 42), c(&ds, 3, 8, 43);
  ASSERT_TRUE(a.Init().ok());
  ASSERT_TRUE(b.Init().ok());
  ASSERT_TRUE(c.Init().ok());
  std::vector<int32_t> xa(24), ya(24), xb(24), yb(24), xc(24), yc(24);
  // 124 windows: run past an epoch boundary.
  for (int step = 0; step < 50; ++step) {
    ASSERT_TRUE(a.NextBatch(xa.data(), ya.data()).ok());
    ASSERT_TRUE(b.NextBatch(xb.data(), yb.data()).ok());
    ASSERT_TRUE(c.NextBatch(xc.data(), yc.data()).ok());
    ASSERT_EQ(xa, xb);
    for (int i = 0; i < 24; ++i) ASSERT_EQ(ya[i], xa[i] + 1);  // targets are inputs shifted
  }
  EXPECT_NE(xa, xc);
  // Resume from a cursor: the same batches follow.
  DataLoader r(&ds, 3, 8, 42);
  ASSERT_TRUE(r.Init().ok());
  r.set_cursor(a.cursor());
  for (int step = 0; step < 10; ++step) {
    ASSERT_TRUE(a.NextBatch(xa.data(), ya.data()).ok());
    ASSERT_TRUE(r.NextBatch(xb.data(), yb.data()).ok());
    ASSERT_EQ(xa, xb);
  }
}

TEST(DataLoader, RanksTakeDisjointWindows) {
  std::vector<int32_t> toks(81);
  for (int i = 0; i < 81; ++i) toks[i] = i;
  auto ds = TokenDataset::FromTokens(toks);
  DataLoader r0(&ds, 1, 8, 7, 0, 2), r1(&ds, 1, 8, 7, 1, 2);
  ASSERT_TRUE(r0.Init().ok());
  ASSERT_TRUE(r1.Init().ok());
  std::set<int32_t> seen;
  std::vector<int32_t> x(8), y(8);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(r0.NextBatch(x.data(), y.data()).ok());
    EXPECT_TRUE(seen.insert(x[0]).second);
    ASSERT_TRUE(r1.NextBatch(x.data(), y.data()).ok());
    EXPECT_TRUE(seen.insert(x[0]).second);
  }
  EXPECT_EQ(seen.size(), 10u);
}

TEST(DataLoader, TooShortCorpusIsRefused) {
  auto ds = TokenDataset::FromTokens({1, 2, 3});
  DataLoader l(&ds, 1, 8, 1);
  EXPECT_FALSE(l.Init().ok());
}

}  // namespace
}  // namespace fp8rt
