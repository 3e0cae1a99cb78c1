#include "ckpt/export.h"

#include "ckpt/manifest.h"

#include <fmt/format.h>

#include <filesystem>

namespace moco::ckpt {

ExportSummary export_module(const std::string& checkpoint_dir, const std::string& module,
                            const std::vector<std::string>& drop_prefixes, const std::string& out_path) {
  CheckpointReader reader(checkpoint_dir);
  const std::string prefix = module + "/";
  // Written beside the target and renamed: a failed export never leaves a half file under its name.
  const std::string tmp = out_path + ".tmp";
  ExportSummary summary;
  summary.step = reader.manifest().step;
  {
    H5TensorWriter out(tmp);
    out.write_string_attribute("source", fmt::format("{} (step {}), module {}", checkpoint_dir, summary.step, module));
    // The training config travels along: some of the architecture (a stem's stride) shows in no
    // tensor's shape, and whoever loads the export checks it against their own.
    out.write_string_attribute("config_yaml", reader.manifest().config_yaml);
    for (const auto& record : reader.manifest().tensors) {
      if (record.rank_local || record.name.rfind(prefix, 0) != 0) continue;
      const std::string key = record.name.substr(prefix.size());
      bool dropped = false;
      for (const auto& p : drop_prefixes) dropped = dropped || key.rfind(p, 0) == 0;
      if (dropped) continue;
      out.write(key, reader.read(record));
      ++summary.tensors;
      summary.bytes += record.bytes;
    }
    out.close();
  }
  if (summary.tensors == 0) {
    std::filesystem::remove(tmp);
    throw CheckpointError(fmt::format("{}: no tensor of module '{}' to export", checkpoint_dir, module));
  }
  std::filesystem::rename(tmp, out_path);
  return summary;
}

}  // namespace moco::ckpt
