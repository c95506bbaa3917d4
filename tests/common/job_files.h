// Files a submitted job may name, for the scheduler's tests: a config directory holding a small
// corpus and training configs at the config_path names the tests use, and the API options that
// make it the config directory and the one root of config paths and inputs (common/input_paths.h).
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "common/status.h"
#include "scheduler/api.h"

namespace fp8rt::test {

// A small byte-level GPT reading `corpus`.
inline std::string TinyConfigYaml(const std::string& corpus, int steps = 20) {
  return StrCat("name: tiny\nmodel: {n_layer: 1, n_embd: 32, n_head: 2, block_size: 32}\n",
                "data: {train: ", corpus, "}\n",
                "train: {batch_size: 2, seq_len: 32, total_steps: ", steps, ", lr: 0.001}\n");
}

// `dir`/corpus.txt, and `dir`/{c, c.yaml, configs/a.yaml, configs/gpt.yaml} reading it.
inline void WriteJobFiles(const std::string& dir) {
  std::filesystem::create_directories(dir + "/configs");
  {
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 200; ++i) corpus << "The quick brown fox jumps over the lazy dog. ";
  }
  for (const char* name : {"c", "c.yaml", "configs/a.yaml", "configs/gpt.yaml"}) {
    std::ofstream(dir + "/" + name) << TinyConfigYaml(dir + "/corpus.txt");
  }
}

// API options whose config directory, config root and data root are `dir`.
inline sched::ApiOptions RootedAt(const std::string& dir, sched::ApiOptions o = {}) {
  o.config_dir = dir;
  o.config_inputs.roots = {dir};
  o.data_inputs.roots = {dir};
  return o;
}

}  // namespace fp8rt::test
