// The FP8 scale state as first-class, step-versioned records in RocksDB (sync writes): every
// tensor's amax history, scale and scale_inv, keyed by step and tensor name, so the state at
// any checkpointed step can be read back exactly and inspected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/dtype.h"

namespace rocksdb {
class DB;
class Status;
}

namespace fp8rt {

struct TensorScaleRecord {
  std::string name;                 // e.g. "h3.fc.weight", "h3.fc.grad_output"
  Fp8Format format = Fp8Format::kE4M3;
  int32_t pos = 0;                  // ring position of the next write
  float amax = 0;                   // amax accumulated since the last update (normally 0)
  float scale = 1;
  float scale_inv = 1;
  std::vector<float> amax_history;  // (H) in storage order; pos says where the ring is
};

class ScaleStore {
 public:
  // Opens (creating if `create`) the store at `path`.
  static Result<std::unique_ptr<ScaleStore>> Open(const std::string& path, bool create);
  // Opens an existing store for reading only, without its lock: every rank of a resumed job
  // reads the same store at once (Put then fails).
  static Result<std::unique_ptr<ScaleStore>> OpenReadOnly(const std::string& path);
  ~ScaleStore();
  ScaleStore(const ScaleStore&) = delete;
  ScaleStore& operator=(const ScaleStore&) = delete;

  // Writes all records of one step in one synced batch (replacing that step if present).
  Status Put(int64_t step, const std::vector<TensorScaleRecord>& records);
  // Records of `step` in name order; NotFound if the step was never written.
  Result<std::vector<TensorScaleRecord>> Get(int64_t step) const;
  // Removes the records of `steps` (of checkpoints removed by retention), in one synced batch.
  Status Delete(const std::vector<int64_t>& steps);
  // Every step that has records, ascending.
  Result<std::vector<int64_t>> Steps() const;

 private:
  explicit ScaleStore(rocksdb::DB* db) : db_(db) {}
  // The store `db` that DB::Open or OpenForReadOnly gave with `s`, or the error naming `path`.
  static Result<std::unique_ptr<ScaleStore>> Opened(const std::string& path,
                                                    const rocksdb::Status& s, rocksdb::DB* db);
  rocksdb::DB* db_;
};

// Human-readable dump (fp8train --inspect-scales): one line per tensor.
std::string FormatScaleRecords(int64_t step, const std::vector<TensorScaleRecord>& records);

}  // namespace fp8rt
