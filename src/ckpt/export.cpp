#include "ckpt/export.h"

#include "ckpt/manifest.h"

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>

namespace moco::ckpt {
namespace {

ExportSummary write_export(CheckpointReader& reader, const std::string& checkpoint_dir, const std::string& module,
                           const std::vector<std::string>& drop_prefixes, const std::string& tmp) {
  const std::string prefix = module + "/";
  ExportSummary summary;
  summary.step = reader.manifest().step;
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
  return summary;
}

}  // namespace

ExportSummary export_module(const std::string& checkpoint_dir, const std::string& module,
                            const std::vector<std::string>& drop_prefixes, const std::string& out_path) {
  CheckpointReader reader(checkpoint_dir);
  // Written beside the target and renamed over it: OUT is the old file or the whole new one, never
  // half of one. The temporary name is this process's; any failure removes it.
  const std::string tmp = out_path + ".tmp-" + std::to_string(::getpid());
  ExportSummary summary;
  try {
    summary = write_export(reader, checkpoint_dir, module, drop_prefixes, tmp);
    if (summary.tensors == 0)
      throw CheckpointError(fmt::format("{}: no tensor of module '{}' to export", checkpoint_dir, module));
    std::filesystem::rename(tmp, out_path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    try {
      throw;
    } catch (const std::exception& e) {
      // Named by OUT, not only by the temporary name the failing call saw (a full disk: its flush).
      throw CheckpointError(fmt::format("export to {} failed, {} left as it was: {}", out_path, out_path, e.what()));
    }
  }
  return summary;
}

}  // namespace moco::ckpt
