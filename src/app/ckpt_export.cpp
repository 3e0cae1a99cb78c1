#include "app/ckpt_export.h"

#include "app/methods.h"
#include "app/official_export.h"
#include "app/program.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/export.h"
#include "ckpt/manifest.h"
#include "run/config.h"
#include "sys/paths.h"
#include "sys/removed_on_signal.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <iostream>
#include <set>

namespace moco::app {
namespace {

using ckpt::CheckpointReader;

// The run a checkpoint folder belongs to (RUN/checkpoints/step_N: RUN, links resolved), or empty.
std::string run_of(const std::string& dir) {
  std::error_code ec;
  const auto resolved = std::filesystem::weakly_canonical(std::filesystem::absolute(dir, ec), ec);
  if (ec || resolved.parent_path().filename() != "checkpoints") return {};
  return resolved.parent_path().parent_path().string();
}

// OUT may not lie inside what export reads: the checkpoint, what CHECKPOINT names (a run, its
// checkpoints/), nor the run the checkpoint belongs to, whose other checkpoints and `latest` a write
// would replace. Nor may it be empty or a folder; --force replaces only a regular file (never a
// device such as /dev/null, which the rename would replace with a file).
void check_export_target(const std::string& path, const std::string& dir, const std::string& out, bool force) {
  if (out.empty()) throw Refusal("export: OUT is empty: name a file to write");
  if (sys::lies_within(out, dir))
    throw Refusal(fmt::format("export: OUT {} lies inside the checkpoint {} it reads: write it elsewhere", out, dir));
  for (const auto& source : {path, run_of(dir)})
    if (!source.empty() && sys::lies_within(out, source))
      throw Refusal(
          fmt::format("export: OUT {} lies inside {}, the run of the checkpoint it reads ({}): write it elsewhere", out,
                      source, dir));
  std::error_code ec;
  if (std::filesystem::is_directory(out, ec))
    throw Refusal(fmt::format("export: OUT {} is a folder: name a file to write", out));
  if (std::filesystem::exists(out, ec) && !force)
    throw Refusal(fmt::format("export: OUT {} exists already (--force replaces it)", out));
  if (std::filesystem::exists(out, ec) && !std::filesystem::is_regular_file(out, ec))
    throw Refusal(fmt::format("export: OUT {} is not a regular file: --force replaces only regular files", out));
}

// The module exported (--module's, or the method's encoder) must be one the checkpoint holds (a group
// of its tensors' names). For --format moco it is the method's encoder: a checkpoint without it is no
// pre-training checkpoint (a moco_lincls run's holds the probe, and failed deep in the export).
void check_export_module(const std::string& dir, const std::string& module, bool whole_model) {
  std::set<std::string> modules;
  for (const auto& t : ckpt::read_manifest(dir).tensors) modules.insert(t.name.substr(0, t.name.find('/')));
  if (modules.count(module)) return;
  const auto held = fmt::format("{}", fmt::join(modules, ", "));
  if (whole_model)
    throw Refusal(
        fmt::format("export: --format moco: {} holds no {} module (it has: {}): not a pre-training "
                    "checkpoint (a moco_lincls run's?); --format moco writes what main_moco.py saves",
                    dir, module, held));
  throw Refusal(fmt::format("export: --module '{}': {} holds no such module (it has: {})", module, dir, held));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// --format names one of ckpt::ExportFormat, and OUT's suffix may not promise another: an .h5 that
// holds a torch.load file (or a .pth that holds HDF5) fails whoever opens it by its name.
// detectron2 reads a file named *.pkl with pickle.load, which cannot read torch.load's zip format.
ckpt::ExportFormat check_export_format(const std::string& name, const std::string& out) {
  const auto format = ckpt::export_format_named(name);
  if (!format) throw Refusal(fmt::format("export: --format '{}': not one of h5, torch, detectron2, moco", name));
  if (*format == ckpt::ExportFormat::detectron2 && ends_with(out, ".pkl"))
    throw Refusal(fmt::format(
        "export: OUT {}: detectron2 reads a .pkl file with pickle.load, not torch.load: name it .pth", out));
  const bool hdf5_name = ends_with(out, ".h5") || ends_with(out, ".hdf5");
  const bool torch_name =
      ends_with(out, ".pth") || ends_with(out, ".pt") || ends_with(out, ".pkl") || ends_with(out, ".tar");
  if ((*format == ckpt::ExportFormat::h5 && torch_name) || (*format != ckpt::ExportFormat::h5 && hdf5_name))
    throw Refusal(fmt::format("export: OUT {} names another format than --format {}: name it {} or give --format {}",
                              out, name, *format == ckpt::ExportFormat::h5 ? ".h5" : ".pth",
                              hdf5_name ? "h5" : "torch"));
  return *format;
}

// detectron2's converter and backbones are ResNets': a ViT's keys renamed by its rules ("stem.cls_token",
// "stem.blocks.0...") load into no detectron2 model. The architecture is the checkpoint's saved config's.
// A saved config that cannot be read (written by another version) leaves the tensors' names to tell.
void check_detectron2_arch(const std::string& dir, ckpt::ExportFormat format) {
  if (format != ckpt::ExportFormat::detectron2) return;
  const auto manifest = ckpt::read_manifest(dir);
  std::string vit;
  try {
    const auto arch = run::load_config_text(methods(), manifest.config_yaml, dir).model.arch;
    if (run::is_vit(arch)) vit = std::string("model.arch=") + run::to_string(arch);
  } catch (const std::exception&) {
    for (const auto& t : manifest.tensors)
      if (ends_with(t.name, "/cls_token")) vit = "it holds " + t.name;
  }
  if (!vit.empty())
    throw Refusal(fmt::format(
        "export: --format detectron2: {} is a ViT ({}); detectron2's converter and backbones are for ResNets: "
        "export it with --format torch (timm's names) or h5",
        dir, vit));
}

// --format moco: the whole checkpoint as the official main_moco.py saves it, named and laid out as the
// run's saved config says (its method, optimizer and arch).
int export_official(const std::string& dir, const std::string& out) {
  const CheckpointReader reader(dir);
  const auto config = run::load_config_text(methods(), reader.manifest().config_yaml, reader.dir());
  const auto info = official_checkpoint_info(config, reader.manifest());
  const auto summary = ckpt::export_official(dir, out, official_layout_for(config), info);
  std::cout << fmt::format(
      "{}: {} tensors ({:.2f} MiB) from {} (step {}, epoch {}), format moco: main_moco.py's "
      "checkpoint of model.method {}, arch {}\n",
      out, summary.tensors, summary.bytes / 1048576.0, dir, summary.step, reader.manifest().epoch, config.model.method,
      info.arch);
  if (const auto note = official_arch_note(config); !note.empty()) std::cerr << "moco_ckpt: " << note << "\n";
  return 0;
}

// The module the checkpoint's method evaluates, as its saved config names the method: MoCo's query
// encoder. A saved config that does not load leaves the choice to --module.
std::string default_module(const std::string& dir) {
  const auto manifest = ckpt::read_manifest(dir);
  std::string group;
  try {
    group = run::method_room(run::load_config_text(methods(), manifest.config_yaml, dir)).encoder_group;
  } catch (const std::exception& e) {
    throw Refusal(
        fmt::format("export: {}'s saved config does not load ({}): name the module with --module", dir, e.what()));
  }
  return group.substr(0, group.find('/'));
}

}  // namespace

int export_checkpoint(const ExportRequest& r) {
  const auto format = check_export_format(r.format, r.out);
  if (format == ckpt::ExportFormat::moco && (!r.module.empty() || r.keep_head))
    throw Refusal(
        "export: --format moco writes the whole model, as main_moco.py saves it: --module and --keep-head "
        "do not apply");
  const auto dir = ckpt::resolve_checkpoint_dir(r.checkpoint);
  check_export_target(r.checkpoint, dir, r.out, r.force);
  const auto module = r.module.empty() ? default_module(dir) : r.module;
  check_export_module(dir, module, /*whole_model=*/format == ckpt::ExportFormat::moco);
  check_detectron2_arch(dir, format);
  for (const auto& stale : sys::remove_stale_temporaries(r.out))
    std::cerr << "moco_ckpt: removed " << stale << ", left by an interrupted export\n";
  if (format == ckpt::ExportFormat::moco) return export_official(dir, r.out);
  // The official detectron2 converter keeps every key of the query encoder, the head's as stem.fc.*.
  const bool all_keys = r.keep_head || format == ckpt::ExportFormat::detectron2;
  // The head is a ResNet's fc or a ViT's head (timm's name; the official main_lincls.py drops it too).
  const auto summary = ckpt::export_module(
      dir, module, all_keys ? std::vector<std::string>{} : std::vector<std::string>{"fc.", "head."}, r.out, format);
  std::cout << fmt::format("{}: {} tensors of {} ({:.2f} MiB) from {} (step {}), format {}\n", r.out, summary.tensors,
                           module, summary.bytes / 1048576.0, dir, summary.step, r.format);
  return 0;
}

}  // namespace moco::app
