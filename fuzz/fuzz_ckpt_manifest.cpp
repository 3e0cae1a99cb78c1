// The checkpoint manifest (manifest.json) parser. A CheckpointError naming the file is the expected
// answer to bad input; anything else (an nlohmann or other exception, a sanitizer report) is a bug.
// A manifest that parses must survive being written and parsed again unchanged, and what the tools
// compute from it (moco_ckpt info: total bytes, the shard files) must be computable.
#include "ckpt/manifest.h"
#include "fuzz_util.h"

#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string where = "fuzz/manifest.json";
  moco::ckpt::Manifest manifest;
  try {
    manifest = moco::ckpt::manifest_from_json(text, where);
  } catch (const moco::ckpt::CheckpointError& e) {
    if (std::string(e.what()).rfind(where + ": ", 0) != 0)
      moco::fuzz::fuzz_bug(std::string("error does not name the file: ") + e.what());
    return 0;
  }
  (void)manifest.total_bytes();
  for (const auto& t : manifest.tensors) {
    (void)manifest.shard_file(t.shard);
    if (manifest.find(t.name, t.shard) == nullptr) moco::fuzz::fuzz_bug("a listed tensor is not found: " + t.name);
  }
  const std::string again = moco::ckpt::manifest_to_json(manifest);
  moco::ckpt::Manifest reread;
  try {
    reread = moco::ckpt::manifest_from_json(again, "round trip");
  } catch (const moco::ckpt::CheckpointError& e) {
    moco::fuzz::fuzz_bug(std::string("a parsed manifest does not parse again once written: ") + e.what());
  }
  if (moco::ckpt::manifest_to_json(reread) != again) moco::fuzz::fuzz_bug("the manifest changes in a round trip");
  return 0;
}
