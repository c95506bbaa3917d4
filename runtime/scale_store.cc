// RocksDB-backed scale store. Keys: "step/<016x step>" -> record count (written last in the same
// batch, so a step is complete iff it exists), "rec/<016x step>/<name>" -> encoded record.
#include "runtime/scale_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <cstring>
#include <iomanip>
#include <sstream>

#include "common/crc32c.h"

namespace fp8rt {
namespace {

constexpr uint32_t kRecordMagic = 0xF8A5CA1E;

std::string StepHex(int64_t step) {
  std::ostringstream os;
  os << std::hex << std::setw(16) << std::setfill('0') << static_cast<uint64_t>(step);
  return os.str();
}

template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

std::string Encode(const TensorScaleRecord& r) {
  std::string s;
  Append(&s, kRecordMagic);
  Append(&s, static_cast<uint8_t>(r.format));
  Append(&s, r.pos);
  Append(&s, r.amax);
  Append(&s, r.scale);
  Append(&s, r.scale_inv);
  Append(&s, static_cast<int32_t>(r.amax_history.size()));
  s.append(reinterpret_cast<const char*>(r.amax_history.data()), r.amax_history.size() * 4);
  Append(&s, Crc32c(s.data(), s.size()));
  return s;
}

Status Decode(const std::string& key, const std::string& v, TensorScaleRecord* r) {
  const size_t fixed = 4 + 1 + 4 + 4 + 4 + 4 + 4;
  auto corrupt = [&](const char* why) {
    return Status::Corruption(StrCat("scale record '", key, "': ", why));
  };
  if (v.size() < fixed + 4) return corrupt("too short");
  uint32_t crc;
  std::memcpy(&crc, v.data() + v.size() - 4, 4);
  if (crc != Crc32c(v.data(), v.size() - 4)) return corrupt("checksum mismatch");
  const char* p = v.data();
  uint32_t magic;
  std::memcpy(&magic, p, 4);
  if (magic != kRecordMagic) return corrupt("bad magic");
  uint8_t fmt = static_cast<uint8_t>(p[4]);
  if (fmt > 1) return corrupt("unknown FP8 format");
  r->format = static_cast<Fp8Format>(fmt);
  std::memcpy(&r->pos, p + 5, 4);
  std::memcpy(&r->amax, p + 9, 4);
  std::memcpy(&r->scale, p + 13, 4);
  std::memcpy(&r->scale_inv, p + 17, 4);
  int32_t h;
  std::memcpy(&h, p + 21, 4);
  if (h < 0 || v.size() != fixed + 4 + static_cast<size_t>(h) * 4) return corrupt("bad length");
  r->amax_history.resize(static_cast<size_t>(h));
  std::memcpy(r->amax_history.data(), p + fixed, static_cast<size_t>(h) * 4);
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<ScaleStore>> ScaleStore::Open(const std::string& path, bool create) {
  rocksdb::Options options;
  options.create_if_missing = create;
  options.paranoid_checks = true;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  return Opened(path, s, db);
}

Result<std::unique_ptr<ScaleStore>> ScaleStore::OpenReadOnly(const std::string& path) {
  rocksdb::Options options;
  options.paranoid_checks = true;
  rocksdb::DB* db = nullptr;
  const rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, path, &db);
  return Opened(path, s, db);
}

Result<std::unique_ptr<ScaleStore>> ScaleStore::Opened(const std::string& path,
                                                       const rocksdb::Status& s, rocksdb::DB* db) {
  if (!s.ok()) {
    return Status::IOError(StrCat("cannot open scale store '", path, "': ", s.ToString()));
  }
  return std::unique_ptr<ScaleStore>(new ScaleStore(db));
}

ScaleStore::~ScaleStore() { delete db_; }

Status ScaleStore::Put(int64_t step, const std::vector<TensorScaleRecord>& records) {
  rocksdb::WriteBatch batch;
  const std::string prefix = "rec/" + StepHex(step) + "/";
  // Replace the step: drop records of an earlier write of the same step first.
  batch.DeleteRange(db_->DefaultColumnFamily(), prefix, prefix + "\xff");
  for (const auto& r : records) {
    if (r.name.empty() || r.name.find('/') != std::string::npos) {
      return Status::InvalidArgument(
          StrCat("scale record name '", r.name, "' is empty or has '/'"));
    }
    batch.Put(prefix + r.name, Encode(r));
  }
  batch.Put("step/" + StepHex(step), std::to_string(records.size()));
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok())
    return Status::IOError(StrCat("scale store write of step ", step, ": ", s.ToString()));
  return Status::Ok();
}

Status ScaleStore::Delete(const std::vector<int64_t>& steps) {
  if (steps.empty()) return Status::Ok();
  rocksdb::WriteBatch batch;
  for (const int64_t step : steps) {
    const std::string prefix = "rec/" + StepHex(step) + "/";
    batch.DeleteRange(db_->DefaultColumnFamily(), prefix, prefix + "\xff");
    batch.Delete("step/" + StepHex(step));
  }
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) return Status::IOError(StrCat("scale store delete: ", s.ToString()));
  return Status::Ok();
}

Result<std::vector<TensorScaleRecord>> ScaleStore::Get(int64_t step) const {
  std::string count;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), "step/" + StepHex(step), &count);
  if (s.IsNotFound()) return Status::NotFound(StrCat("no FP8 scale state for step ", step));
  if (!s.ok()) return Status::IOError(s.ToString());
  std::vector<TensorScaleRecord> out;
  const std::string prefix = "rec/" + StepHex(step) + "/";
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    TensorScaleRecord r;
    r.name = it->key().ToString().substr(prefix.size());
    FP8RT_RETURN_IF_ERROR(Decode(it->key().ToString(), it->value().ToString(), &r));
    out.push_back(std::move(r));
  }
  if (!it->status().ok()) return Status::IOError(it->status().ToString());
  if (std::to_string(out.size()) != count) {
    return Status::Corruption(StrCat("scale state of step ", step, " has ", out.size(),
                                     " records, its index says ", count));
  }
  return out;
}

Result<std::vector<int64_t>> ScaleStore::Steps() const {
  std::vector<int64_t> steps;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek("step/"); it->Valid() && it->key().starts_with("step/"); it->Next()) {
    steps.push_back(static_cast<int64_t>(std::stoull(it->key().ToString().substr(5), nullptr, 16)));
  }
  if (!it->status().ok()) return Status::IOError(it->status().ToString());
  return steps;
}

std::string FormatScaleRecords(int64_t step, const std::vector<TensorScaleRecord>& records) {
  std::ostringstream os;
  os << "step " << step << ": " << records.size() << " FP8 tensors\n";
  os << std::left << std::setw(32) << "tensor" << std::setw(6) << "fmt" << std::setw(14) << "scale"
     << std::setw(14) << "scale_inv" << std::setw(14) << "amax(hist)"
     << "history\n";
  for (const auto& r : records) {
    float hmax = 0;
    for (float a : r.amax_history) hmax = a > hmax ? a : hmax;
    os << std::left << std::setw(32) << r.name << std::setw(6) << Fp8FormatName(r.format)
       << std::setw(14) << r.scale << std::setw(14) << r.scale_inv << std::setw(14) << hmax
       << "len " << r.amax_history.size() << " pos " << r.pos << "\n";
  }
  return os.str();
}

}  // namespace fp8rt
