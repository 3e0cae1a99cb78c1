// The config loader: a YAML file and command-line overrides. The input is the file's text, then
// NUL-separated key=value overrides ("<yaml>\0optim.base_lr=0.06\0model.arch=resnet18").
// A ConfigError is the expected answer to bad input; anything else (another exception, a sanitizer
// report) is a bug. A config that loads must survive what a checkpoint does with it: written with
// to_yaml and read back with load_config_text, unchanged.
#include "fuzz_util.h"
#include "app/methods.h"
#include "run/config.h"

#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const moco::fuzz::ScratchGuard file(moco::fuzz::scratch_path("config"));
  const std::string input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t nul = input.find('\0', start);
    parts.push_back(input.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
    if (nul == std::string::npos) break;
    start = nul + 1;
  }
  const std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  moco::fuzz::write_file(file.path(), parts[0].data(), parts[0].size());

  moco::run::Config config;
  try {
    config = moco::run::load_config(moco::app::methods(), file.path(), overrides);
  } catch (const moco::run::ConfigError&) {
    return 0;
  }
  for (int world = 1; world <= 4; ++world) {
    try {
      moco::run::validate_for_world(config, world, "fuzz");
    } catch (const moco::run::ConfigError&) {
    }
  }
  const std::string yaml = moco::run::to_yaml(config);
  moco::run::Config reloaded;
  try {
    reloaded = moco::run::load_config_text(moco::app::methods(), yaml, "the saved config");
  } catch (const moco::run::ConfigError& e) {
    moco::fuzz::fuzz_bug(std::string("a loaded config does not load again from its own YAML: ") + e.what() + "\n" +
                         yaml);
  }
  const auto changes = moco::run::config_changes(config, reloaded);
  if (!changes.empty())
    moco::fuzz::fuzz_bug("key '" + changes[0].key + "' changes in the round trip: " + changes[0].before + " -> " +
                         changes[0].after);
  return 0;
}
