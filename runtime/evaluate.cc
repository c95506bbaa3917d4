#include "runtime/evaluate.h"

#include <algorithm>
#include <cmath>

namespace fp8rt {

Result<std::unique_ptr<Validator>> Validator::Create(const RunConfig& c, bool exact) {
  if (c.data.val.empty()) return std::unique_ptr<Validator>();
  FP8RT_ASSIGN_OR_RETURN(TokenDataset data, OpenDataset(c, true, exact));
  const int B = c.train.batch_size, T = c.train.seq_len;
  const int64_t windows = (static_cast<int64_t>(data.size()) - 1) / T;
  const int64_t available = windows / B;
  if (available < 1) {
    return Status::InvalidArgument(StrCat(
        "data.val", c.data.val.size() == 1 ? StrCat(" '", c.data.val[0], "'") : std::string(),
        " has ", data.size(), " tokens, fewer than one micro-batch of ", B, " x ", T,
        " (train.batch_size x train.seq_len) + 1"));
  }
  const int64_t asked = std::max<int64_t>(1, c.train.eval_tokens / (int64_t{B} * T));
  const int batches = static_cast<int>(std::min(asked, available));
  return std::unique_ptr<Validator>(new Validator(std::move(data), B, T, batches));
}

Result<double> Validator::Evaluate(GptModel& model, const std::function<void()>& tick) {
  const size_t M = static_cast<size_t>(B_) * T_;
  std::vector<int32_t> x(M), y(M);
  double sum = 0;
  for (int b = 0; b < batches_; ++b) {
    for (int i = 0; i < B_; ++i) {
      const size_t start = (static_cast<size_t>(b) * B_ + i) * T_;
      FP8RT_RETURN_IF_ERROR(
          data_.Copy(start, static_cast<uint64_t>(T_), x.data() + static_cast<size_t>(i) * T_));
      FP8RT_RETURN_IF_ERROR(
          data_.Copy(start + 1, static_cast<uint64_t>(T_), y.data() + static_cast<size_t>(i) * T_));
    }
    float loss = 0;
    FP8RT_RETURN_IF_ERROR(model.Forward(x.data(), y.data(), &loss, nullptr));
    if (!std::isfinite(loss)) {
      return Status::NonFinite(StrCat("validation loss is ", loss, " on held-out micro-batch ", b));
    }
    sum += loss;
    if (tick) tick();
  }
  return sum / batches_;
}

}  // namespace fp8rt
