// defines: Constant (one row of a table of published constants: a config key, the value the paper or
// the official script gives it, where that number comes from) and expect_constants (every row of a
// table against a loaded config). Used by tests/lincls/protocol_test.cpp and tests/run/paper_configs_test.cpp;
// docs/evaluation.md summarises the tables.
#pragma once

#include "run/config.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

namespace moco::constant_table {

// The shipped configs (configs/ at the repository's root).
inline std::string config_path(const std::string& name) {
  return std::string(MOCO_TEST_DATA_DIR) + "/../../configs/" + name;
}

struct Constant {
  const char* key;     // dotted config key, as in the YAML files ("moco.temperature")
  const char* value;   // YAML, as a config file writes it: "0.2", "[120, 160]", "cosine", "true"
  const char* source;  // the flag of main_moco.py / main_lincls.py or the paper's section, or "project choice: why"
};

// Numbers compare as numbers (30 == 30.0, 0.0001 == 1e-4), lists element by element, the rest as text.
inline bool same_value(const YAML::Node& got, const YAML::Node& want) {
  if (got.IsSequence() || want.IsSequence()) {
    if (!got.IsSequence() || !want.IsSequence() || got.size() != want.size()) return false;
    for (size_t i = 0; i < got.size(); ++i)
      if (!same_value(got[i], want[i])) return false;
    return true;
  }
  double a = 0, b = 0;
  if (YAML::convert<double>::decode(got, a) && YAML::convert<double>::decode(want, b)) return a == b;
  return got.Scalar() == want.Scalar();
}

inline std::string flow(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

// Each row's key read from the effective config (to_yaml, so every key reads as the config file
// writes it) and compared with the row's value; a mismatch names the config, the key and the source.
inline void expect_constants(const run::Config& config, const std::vector<Constant>& table,
                             const std::string& config_name) {
  const YAML::Node effective = YAML::Load(run::to_yaml(config));
  for (const auto& row : table) {
    const std::string key = row.key;
    const auto dot = key.find('.');
    ASSERT_NE(dot, std::string::npos) << key;
    const YAML::Node got = effective[key.substr(0, dot)][key.substr(dot + 1)];
    ASSERT_TRUE(got.IsDefined()) << config_name << ": no key " << key;
    EXPECT_TRUE(same_value(got, YAML::Load(row.value)))
        << config_name << ": " << key << " is " << flow(got) << ", but " << row.value << " (" << row.source << ")";
  }
}

}  // namespace moco::constant_table
