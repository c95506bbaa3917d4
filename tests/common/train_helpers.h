// What the CPU training tests share: the tiny byte-level run, and picking metrics lines.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "runtime/config.h"

namespace fp8rt::test {

// 2 x 64, 4 heads, T = 64, batch 4, lr 3e-3 with 10 warmup steps, on the text at `train_path`.
inline RunConfig TinyRunConfig(const std::string& train_path, Precision p, int total_steps) {
  RunConfig c;
  c.model = {2, 64, 4, 64, 256};
  c.data.train_path = train_path;
  c.train.batch_size = 4;
  c.train.seq_len = 64;
  c.train.total_steps = total_steps;
  c.train.lr = 3e-3f;
  c.train.min_lr = 3e-4f;
  c.train.warmup_steps = 10;
  c.precision = p;
  return c;
}

// The lines of a metrics stream that hold `"key"`.
inline std::vector<std::string> MetricsLinesWith(const std::string& metrics, const std::string& key) {
  std::vector<std::string> out;
  std::istringstream in(metrics);
  for (std::string l; std::getline(in, l);) {
    if (l.find("\"" + key + "\"") != std::string::npos) out.push_back(l);
  }
  return out;
}

}  // namespace fp8rt::test
