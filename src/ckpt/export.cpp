#include "ckpt/export.h"

#include "ckpt/manifest.h"
#include "ckpt/official_checkpoint.h"
#include "ckpt/torch_export.h"
#include "sys/fault_hooks.h"
#include "sys/removed_on_signal.h"

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>

namespace moco::ckpt {
namespace {

// Rank 0's copy of a rank-local BatchNorm statistic (each rank keeps its own when no step broadcasts
// them) is the model's, as DDP's broadcast_buffers would give every rank; other rank-local tensors
// (each rank's random generator) belong to no model.
bool exported_copy(const TensorRecord& record) {
  return !record.rank_local || (record.shard == 0 && is_batchnorm_statistic(record.name));
}

// The module's tensors, keys without "<module>/", minus the dropped prefixes, in manifest order.
NamedTensors selected_tensors(CheckpointReader& reader, const std::string& module,
                              const std::vector<std::string>& drop_prefixes, ExportSummary& summary) {
  const std::string prefix = module + "/";
  NamedTensors selected;
  for (const auto& record : reader.manifest().tensors) {
    if (!exported_copy(record) || record.name.rfind(prefix, 0) != 0) continue;
    const std::string key = record.name.substr(prefix.size());
    bool dropped = false;
    for (const auto& p : drop_prefixes) dropped = dropped || key.rfind(p, 0) == 0;
    if (dropped) continue;
    selected.emplace_back(key, reader.read(record));
    ++summary.tensors;
    summary.bytes += record.bytes;
  }
  return selected;
}

void write_h5(const NamedTensors& tensors, const std::string& source, const std::string& config_yaml,
              const std::string& tmp, sys::CheckpointFaultKind fault) {
  H5TensorWriter out(tmp);
  // MOCO_CKPT_FAULT=pause_in_export: the temporary file is begun; a test interrupts the export here.
  if (fault == sys::CheckpointFaultKind::kPauseInExport) sys::hooks().pause_for_checkpoint_fault(tmp);
  out.write_string_attribute("source", source);
  // The training config travels along: some of the architecture (a stem's stride) shows in no
  // tensor's shape, and whoever loads the export checks it against their own.
  out.write_string_attribute("config_yaml", config_yaml);
  for (const auto& [key, tensor] : tensors) out.write(key, tensor);
  out.close();
}

ExportSummary write_export(CheckpointReader& reader, const std::string& checkpoint_dir, const std::string& module,
                           const std::vector<std::string>& drop_prefixes, const std::string& tmp, ExportFormat format,
                           sys::CheckpointFaultKind fault) {
  ExportSummary summary;
  summary.step = reader.manifest().step;
  const auto tensors = selected_tensors(reader, module, drop_prefixes, summary);
  if (tensors.empty())
    throw CheckpointError(fmt::format("{}: no tensor of module '{}' to export", checkpoint_dir, module));
  if (format == ExportFormat::torch) {
    write_torch_state_dict(tmp, tensors);
  } else if (format == ExportFormat::detectron2) {
    write_detectron2_weights(tmp, tensors);
  } else {
    write_h5(tensors, fmt::format("{} (step {}), module {}", checkpoint_dir, summary.step, module),
             reader.manifest().config_yaml, tmp, fault);
  }
  return summary;
}

// A checkpoint gone by the time its export failed was most likely deleted by its run: retention
// removes the older checkpoints of a running run, also one being read.
std::string deleted_meanwhile(const std::string& checkpoint_dir) {
  std::error_code ec;
  if (std::filesystem::exists(checkpoint_dir, ec)) return {};
  return fmt::format(
      "; {} was deleted while it was read (a running run's retention, ckpt.keep_last, deletes its older "
      "checkpoints): export one the run keeps, or the newest",
      checkpoint_dir);
}

// Writes OUT through `write(reader, tmp, fault)` beside it and renames it over OUT: OUT is the old file
// or the whole new one, never half of one. The temporary name is this process's; any failure removes
// it, and so do SIGINT, SIGTERM and SIGHUP (a kill -9's is removed by the next export to OUT:
// remove_stale_temporaries).
template <typename Write>
ExportSummary export_atomically(const std::string& checkpoint_dir, const std::string& out_path, const Write& write) {
  CheckpointReader reader(checkpoint_dir);
  const auto fault = sys::hooks().checkpoint_fault(0).kind;  // asked once: it counts the calls
  // MOCO_CKPT_FAULT=pause_before_export_read: a test deletes the checkpoint here, as retention would.
  if (fault == sys::CheckpointFaultKind::kPauseBeforeExportRead)
    sys::hooks().pause_for_checkpoint_fault(checkpoint_dir);
  const std::string tmp = out_path + ".tmp-" + std::to_string(::getpid());
  const sys::RemovedOnSignal interrupted(tmp);
  ExportSummary summary;
  try {
    summary = write(reader, tmp, fault);
    std::filesystem::rename(tmp, out_path);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    try {
      throw;
    } catch (const std::exception& e) {
      // Named by OUT, not only by the temporary name the failing call saw (a full disk: its flush).
      throw CheckpointError(fmt::format("export to {} failed, {} left as it was: {}{}", out_path, out_path, e.what(),
                                        deleted_meanwhile(checkpoint_dir)));
    }
  }
  return summary;
}

// Every tensor of the checkpoint, of the rank-local ones those exported_copy takes (official_checkpoint
// has no place for each rank's random generator).
NamedTensors official_tensors(CheckpointReader& reader, ExportSummary& summary) {
  NamedTensors tensors;
  for (const auto& record : reader.manifest().tensors) {
    if (!exported_copy(record)) continue;
    tensors.emplace_back(record.name, reader.read(record));
    ++summary.tensors;
    summary.bytes += record.bytes;
  }
  return tensors;
}

// The whole epochs the run has done (progress/epoch, src/train/train_state.cpp).
int64_t epochs_done(const NamedTensors& tensors, const std::string& checkpoint_dir) {
  for (const auto& [name, tensor] : tensors)
    if (name == "progress/epoch") return tensor.item<int64_t>();
  throw CheckpointError(fmt::format("{}: no tensor progress/epoch", checkpoint_dir));
}

}  // namespace

std::optional<ExportFormat> export_format_named(const std::string& name) {
  if (name == "h5") return ExportFormat::h5;
  if (name == "torch") return ExportFormat::torch;
  if (name == "detectron2") return ExportFormat::detectron2;
  if (name == "moco") return ExportFormat::moco;
  return std::nullopt;
}

ExportSummary export_module(const std::string& checkpoint_dir, const std::string& module,
                            const std::vector<std::string>& drop_prefixes, const std::string& out_path,
                            ExportFormat format) {
  if (format == ExportFormat::moco) throw std::invalid_argument("export_module: the moco format is export_official's");
  return export_atomically(checkpoint_dir, out_path, [&](CheckpointReader& reader, const std::string& tmp, auto fault) {
    return write_export(reader, checkpoint_dir, module, drop_prefixes, tmp, format, fault);
  });
}

ExportSummary export_official(const std::string& checkpoint_dir, const std::string& out_path,
                              const OfficialLayout& layout, OfficialCheckpointInfo info) {
  return export_atomically(checkpoint_dir, out_path, [&](CheckpointReader& reader, const std::string& tmp, auto) {
    ExportSummary summary;
    summary.step = reader.manifest().step;
    const auto tensors = official_tensors(reader, summary);
    info.epoch = epochs_done(tensors, checkpoint_dir);
    write_torch_file(tmp, official_checkpoint(tensors, layout, info));
    return summary;
  });
}

}  // namespace moco::ckpt
