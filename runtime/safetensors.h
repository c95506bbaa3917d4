// safetensors (Hugging Face's tensor file, https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets":
// [begin, end]}, ..., optional "__metadata__": {string: string}}), then the tensors' raw
// little-endian bytes, offsets relative to the end of the header. Read and written against that
// spec; a file that breaks it is refused naming what is wrong, never half-read:
// - the header length past the file, or over 100 MB; JSON that is not an object of objects;
// - an unknown dtype, a negative or non-integer dimension, offsets whose span is not the shape's
//   bytes, offsets past the data, overlapping tensors, or bytes no tensor covers (holes);
// - a name given twice.
// Writes are atomic (path.tmp, fsync, rename): a failed write leaves no file.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt {

// The dtypes of the spec. Element sizes: F64/I64/U64 8, F32/I32/U32 4, F16/BF16/I16/U16 2,
// F8_E4M3/F8_E5M2/I8/U8/BOOL 1.
int64_t SafetensorsDTypeBytes(const std::string& dtype);  // 0 when unknown

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t Elements() const;
};

class SafetensorsFile {
 public:
  // Reads and validates the whole file (header and data).
  static Result<SafetensorsFile> Read(const std::string& path);
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when there is no such tensor.
  const SafetensorsTensor* Find(const std::string& name) const;
  // The tensor's values as float (F32, BF16 and F16; other dtypes refused naming the tensor).
  Result<std::vector<float>> Floats(const std::string& name) const;
  const uint8_t* Bytes(const SafetensorsTensor& t) const { return data_.data() + t.begin; }

 private:
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;  // in file order (by offset)
  std::map<std::string, std::string> metadata_;
  std::vector<uint8_t> data_;
};

// One tensor to write: FP32 values stored as F32 or BF16 (round to nearest even).
struct SafetensorsOut {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};
// Writes the tensors in the given order, dtype "F32" or "BF16"; the header is padded with spaces
// so the data starts 8-byte aligned (as the reference writer does).
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                        const std::string& dtype,
                        const std::map<std::string, std::string>& metadata = {});

}  // namespace fp8rt
