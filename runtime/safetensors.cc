// safetensors reader and writer, against the format's spec (runtime/safetensors.h).
#include "runtime/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "common/atomic_file.h"
#include "common/read_file.h"
#include "kernels/dtype.h"

namespace fp8rt {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the reference reader's limit

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    v = man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

}  // namespace

int64_t SafetensorsDTypeBytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "F8_E4M3" || d == "F8_E5M2" || d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

int64_t SafetensorsTensor::Elements() const {
  // A validated tensor's byte span bounds the product, unless a dimension is 0 (then the other
  // dimensions may be anything, and multiplying them first could overflow).
  for (int64_t d : shape) {
    if (d == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsFile> SafetensorsFile::Read(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument(StrCat("safetensors file ", path, ": ", why));
  };
  // A regular file (a FIFO is refused, never waited on), read through the descriptor that was
  // checked: /proc/self/fd/N names that open file, not the path again.
  FP8RT_ASSIGN_OR_RETURN(const int fd, OpenRegularFile(path, "safetensors file"));
  std::ifstream in(StrCat("/proc/self/fd/", fd), std::ios::binary);
  ::close(fd);  // (the stream holds its own descriptor of the same file)
  if (!in) return Status::NotFound(StrCat("safetensors file ", path, ": cannot open it"));
  in.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  if (size < 8) return bad(StrCat("truncated: ", size, " bytes, shorter than the 8-byte header length"));
  uint8_t len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const uint64_t n = LoadLe64(len_bytes);
  if (n > kMaxHeaderBytes) return bad(StrCat("header length ", n, " is over the 100 MB limit"));
  if (n > size - 8) {
    return bad(StrCat("truncated: the header says ", n, " bytes but the file has ", size - 8,
                      " after the length"));
  }
  std::string header(n, '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  if (n == 0 || header[0] != '{') return bad("the header is not a JSON object");

  // Names at the top level, to refuse one given twice (a JSON parser keeps the last silently).
  std::set<std::string> seen;
  std::string duplicate;
  const auto cb = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string k = parsed.get<std::string>();
      if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header, cb);
  } catch (const nlohmann::json::exception& e) {
    return bad(StrCat("the header is not valid JSON (", e.what(), ")"));
  }
  if (!duplicate.empty()) return bad(StrCat("tensor '", duplicate, "' is named twice"));
  if (!j.is_object()) return bad("the header is not a JSON object");

  SafetensorsFile f;
  f.path_ = path;
  const uint64_t data_bytes = size - 8 - n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return bad(StrCat("__metadata__ '", m.key(), "' is not a string"));
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = StrCat("tensor '", name, "'");
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets")) {
      return bad(StrCat(what, " needs dtype, shape and data_offsets"));
    }
    SafetensorsTensor t;
    t.name = name;
    if (!v["dtype"].is_string()) return bad(StrCat(what, ": dtype is not a string"));
    t.dtype = v["dtype"].get<std::string>();
    const int64_t es = SafetensorsDTypeBytes(t.dtype);
    if (es == 0) return bad(StrCat(what, ": unknown dtype '", t.dtype, "'"));
    if (!v["shape"].is_array()) return bad(StrCat(what, ": shape is not an array"));
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return bad(StrCat(what, ": shape ", v["shape"].dump(), " has a dimension that is not a "
                                "non-negative integer"));
      }
      t.shape.push_back(d.get<int64_t>());
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned()) {
      return bad(StrCat(what, ": data_offsets ", off.dump(), " is not [begin, end]"));
    }
    t.begin = off[0].get<uint64_t>(), t.end = off[1].get<uint64_t>();
    if (t.end < t.begin || t.end > data_bytes) {
      return bad(StrCat(what, ": data_offsets [", t.begin, ", ", t.end, "] lie outside the ",
                        data_bytes, " data bytes (truncated file?)"));
    }
    double elems = 1;  // in double first: a huge shape must not overflow before the check
    for (int64_t d : t.shape) elems *= static_cast<double>(d);
    if (elems * es != static_cast<double>(t.end - t.begin)) {
      return bad(StrCat(what, ": shape ", v["shape"].dump(), " of ", t.dtype, " is ", elems * es,
                        " bytes but data_offsets span ", t.end - t.begin));
    }
    f.tensors_.push_back(std::move(t));
  }
  // The tensors must tile the data section: no overlap, no hole, nothing after the last.
  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t at = 0;
  for (const auto& t : f.tensors_) {
    if (t.begin < at) {
      return bad(StrCat("tensor '", t.name, "' at [", t.begin, ", ", t.end,
                        "] overlaps the tensor before it (which ends at ", at, ")"));
    }
    if (t.begin > at) {
      return bad(StrCat("bytes [", at, ", ", t.begin, ") of the data belong to no tensor (a hole "
                        "before '", t.name, "')"));
    }
    at = t.end;
  }
  if (at != data_bytes) {
    return bad(StrCat("the data section has ", data_bytes, " bytes but the tensors cover ", at));
  }
  f.data_.resize(data_bytes);
  in.read(reinterpret_cast<char*>(f.data_.data()), static_cast<std::streamsize>(data_bytes));
  if (static_cast<uint64_t>(in.gcount()) != data_bytes) return bad("short read of the data");
  return f;
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<std::vector<float>> SafetensorsFile::Floats(const std::string& name) const {
  const SafetensorsTensor* t = Find(name);
  if (t == nullptr) {
    return Status::NotFound(StrCat("safetensors file ", path_, " has no tensor '", name, "'"));
  }
  const int64_t n = t->Elements();
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* p = Bytes(*t);
  if (t->dtype == "F32") {
    std::memcpy(out.data(), p, static_cast<size_t>(n) * 4);
  } else if (t->dtype == "BF16" || t->dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
      if (t->dtype == "BF16") {
        bf16 b;
        b.bits = h;
        out[i] = ToFloat(b);
      } else {
        out[i] = HalfToFloat(h);
      }
    }
  } else {
    return Status::InvalidArgument(StrCat("safetensors file ", path_, ": tensor '", name, "' is ",
                                          t->dtype, "; F32, BF16 or F16 expected"));
  }
  return out;
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsOut>& tensors,
                        const std::string& dtype,
                        const std::map<std::string, std::string>& metadata) {
  if (dtype != "F32" && dtype != "BF16") {
    return Status::InvalidArgument(StrCat("WriteSafetensors: dtype ", dtype, "; F32 or BF16"));
  }
  const int64_t es = SafetensorsDTypeBytes(dtype);
  // nlohmann's ordered_json keeps the tensors in the order given.
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return Status::InvalidArgument(StrCat("WriteSafetensors: tensor name '", t.name,
                                            "' is reserved or given twice"));
    }
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (n != static_cast<int64_t>(t.values.size())) {
      return Status::InvalidArgument(StrCat("WriteSafetensors: tensor '", t.name, "' has ",
                                            t.values.size(), " values for ", n, " elements"));
    }
    const uint64_t bytes = static_cast<uint64_t>(n * es);
    h[t.name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string header = h.dump();
  header.append((8 - (8 + header.size()) % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + header.size() + at);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>((header.size() >> (8 * i)) & 0xff);
  std::memcpy(out.data() + 8, header.data(), header.size());
  uint8_t* p = out.data() + 8 + header.size();
  for (const auto& t : tensors) {
    for (float v : t.values) {
      if (es == 4) {
        std::memcpy(p, &v, 4);  // little-endian host
      } else {
        const uint16_t b = bf16(v).bits;
        p[0] = static_cast<uint8_t>(b & 0xff), p[1] = static_cast<uint8_t>(b >> 8);
      }
      p += es;
    }
  }
  return WriteFileAtomic(path, out.data(), out.size());
}

}  // namespace fp8rt
