// The keys of a training config (runtime/config.h) that hold file paths, relative to the config
// file's directory: one list for everything that moves a config elsewhere (fp8ctl submit, fp8d's
// job copy; fp8train's LoadRunConfig resolves the same keys of its parsed struct).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

namespace fp8rt {

// (section, key): data.train, data.val, train.init_from.
inline constexpr std::pair<const char*, const char*> kConfigPathKeys[] = {
    {"data", "train"}, {"data", "val"}, {"train", "init_from"}};

// Makes every relative path of kConfigPathKeys in a JSON training config absolute against
// base_dir (itself made absolute); other values and keys are left as they are.
inline void AbsoluteConfigPaths(nlohmann::json* config, const std::filesystem::path& base_dir) {
  for (const auto& [section, key] : kConfigPathKeys) {
    if (!config->contains(section) || !(*config)[section].is_object()) continue;
    nlohmann::json& d = (*config)[section];
    if (!d.contains(key) || !d[key].is_string()) continue;
    const std::filesystem::path p = d[key].get<std::string>();
    if (!p.empty() && p.is_relative()) {
      d[key] = (std::filesystem::absolute(base_dir) / p).lexically_normal().string();
    }
  }
}

}  // namespace fp8rt
