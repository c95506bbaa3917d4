// A Megatron-LM indexed dataset writer for tests, from Megatron's documented layout
// (megatron/core/datasets/indexed_dataset.py), independent of the reader under test.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace fp8rt::test {

// A Megatron-LM indexed dataset as its documentation lays it out, written here byte by byte (not
// by our reader's code): "MMIDIDX\0\0", version 1 (uint64), dtype code (uint8), sequence and
// document counts (uint64), lengths (int32), byte offsets (int64), document index (int64).
struct MegatronWriter {
  MegatronWriter(uint8_t c, size_t w) : code(c), width(w) {}
  uint8_t code;
  size_t width;
  std::string bin, idx;
  std::vector<int32_t> lengths;
  std::vector<int64_t> offsets, docs{0};
  template <typename T>
  static void Put(std::string* out, T v) {
    out->append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void Sequence(const std::vector<int64_t>& ids) {
    offsets.push_back(static_cast<int64_t>(bin.size()));
    lengths.push_back(static_cast<int32_t>(ids.size()));
    for (int64_t id : ids) {
      if (width == 2) Put(&bin, static_cast<uint16_t>(id));
      if (width == 4) Put(&bin, static_cast<int32_t>(id));
      if (width == 1) Put(&bin, static_cast<uint8_t>(id));
    }
  }
  void EndDocument() { docs.push_back(static_cast<int64_t>(lengths.size())); }
  void Write(const std::string& prefix, uint64_t version = 1) {
    idx.assign("MMIDIDX\0\0", 9);
    Put(&idx, version);
    Put(&idx, code);
    Put(&idx, static_cast<uint64_t>(lengths.size()));
    Put(&idx, static_cast<uint64_t>(docs.size()));
    for (int32_t n : lengths) Put(&idx, n);
    for (int64_t o : offsets) Put(&idx, o);
    for (int64_t d : docs) Put(&idx, d);
    std::ofstream(prefix + ".bin", std::ios::binary) << bin;
    std::ofstream(prefix + ".idx", std::ios::binary) << idx;
  }
};

}  // namespace fp8rt::test
