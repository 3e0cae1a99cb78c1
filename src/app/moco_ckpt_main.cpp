// moco_ckpt: inspect, verify, export (a backbone, the official checkpoint) and diff moco_dist checkpoints.
#include "app/methods.h"
#include "app/official_export.h"
#include "app/parse_command_line.h"
#include "app/program.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/export.h"
#include "ckpt/h5_tensor_file.h"
#include "ckpt/manifest.h"
#include "run/config.h"
#include "sys/paths.h"
#include "sys/removed_on_signal.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>

namespace {

using moco::ckpt::CheckpointError;
using moco::ckpt::CheckpointReader;

using moco::app::Refusal;  // a request refused before any work: exit 2, nothing written

std::string shape_text(const std::vector<int64_t>& shape) {
  return shape.empty() ? "scalar" : fmt::format("{}", fmt::join(shape, "x"));
}

// Every shard the manifest names opens as HDF5: a missing, empty or cut file fails inspect, which
// would otherwise print the manifest's word for a checkpoint that cannot be read.
void check_shards_open(const CheckpointReader& reader) {
  std::set<int> shards;
  for (const auto& t : reader.manifest().tensors) shards.insert(t.shard);
  for (int shard : shards) {
    const auto file = std::filesystem::path(reader.dir()) / reader.manifest().shard_file(shard);
    std::error_code ec;
    if (std::filesystem::is_regular_file(file, ec) && std::filesystem::file_size(file, ec) == 0)
      throw CheckpointError(file.string() + ": the shard file is empty (0 bytes)");
    moco::ckpt::H5TensorReader opened(file.string());
  }
}

int inspect(const std::string& path) {
  CheckpointReader reader(moco::ckpt::resolve_checkpoint_dir(path));
  check_shards_open(reader);
  const auto& m = reader.manifest();
  std::cout << fmt::format(
      "checkpoint   {}\nstep         {}\nepoch        {:.4f}\nworld size   {}\nglobal batch {}\n"
      "LibTorch     {}\nformat       {}\nwritten      {}\ntensors      {} ({:.2f} MiB)\n",
      reader.dir(), m.step, m.epoch, m.world_size, m.global_batch, m.torch_version, m.format_version, m.created_utc,
      m.tensors.size(), m.total_bytes() / 1048576.0);
  std::map<int, int64_t> shard_bytes;
  for (const auto& t : m.tensors) shard_bytes[t.shard] += t.bytes;
  for (const auto& [shard, bytes] : shard_bytes)
    std::cout << fmt::format("  {}  {:.2f} MiB\n", m.shard_file(shard), bytes / 1048576.0);
  std::cout << "\n";
  for (const auto& t : m.tensors)
    std::cout << fmt::format("{:<60} {:>8} {:>16} shard {}{} crc32 {:08x}\n", t.name, t.dtype, shape_text(t.shape),
                             t.shard, t.rank_local ? " (rank-local)" : "", t.crc32);
  std::cout << "\nconfig:\n" << m.config_yaml;
  return 0;
}

int verify(const std::string& path) {
  CheckpointReader reader(moco::ckpt::resolve_checkpoint_dir(path));
  reader.verify_all();
  std::cout << fmt::format("{}: ok, {} tensors ({:.2f} MiB) match their Fletcher-32 and CRC-32 checksums\n",
                           reader.dir(), reader.manifest().tensors.size(), reader.manifest().total_bytes() / 1048576.0);
  return 0;
}

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
  if (moco::sys::lies_within(out, dir))
    throw Refusal(fmt::format("export: OUT {} lies inside the checkpoint {} it reads: write it elsewhere", out, dir));
  for (const auto& source : {path, run_of(dir)})
    if (!source.empty() && moco::sys::lies_within(out, source))
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

// --module must name a module the checkpoint holds (the group of its tensors' names).
void check_export_module(const std::string& dir, const std::string& module) {
  std::set<std::string> modules;
  for (const auto& t : moco::ckpt::read_manifest(dir).tensors) modules.insert(t.name.substr(0, t.name.find('/')));
  if (!modules.count(module))
    throw Refusal(fmt::format("export: --module '{}': {} holds no such module (it has: {})", module, dir,
                              fmt::join(modules, ", ")));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// --format names one of ckpt::ExportFormat, and OUT's suffix may not promise another: an .h5 that
// holds a torch.load file (or a .pth that holds HDF5) fails whoever opens it by its name.
// detectron2 reads a file named *.pkl with pickle.load, which cannot read torch.load's zip format.
moco::ckpt::ExportFormat check_export_format(const std::string& name, const std::string& out) {
  const auto format = moco::ckpt::export_format_named(name);
  if (!format) throw Refusal(fmt::format("export: --format '{}': not one of h5, torch, detectron2, moco", name));
  if (*format == moco::ckpt::ExportFormat::detectron2 && ends_with(out, ".pkl"))
    throw Refusal(fmt::format(
        "export: OUT {}: detectron2 reads a .pkl file with pickle.load, not torch.load: name it .pth", out));
  const bool hdf5_name = ends_with(out, ".h5") || ends_with(out, ".hdf5");
  const bool torch_name =
      ends_with(out, ".pth") || ends_with(out, ".pt") || ends_with(out, ".pkl") || ends_with(out, ".tar");
  if ((*format == moco::ckpt::ExportFormat::h5 && torch_name) || (*format != moco::ckpt::ExportFormat::h5 && hdf5_name))
    throw Refusal(fmt::format("export: OUT {} names another format than --format {}: name it {} or give --format {}",
                              out, name, *format == moco::ckpt::ExportFormat::h5 ? ".h5" : ".pth",
                              hdf5_name ? "h5" : "torch"));
  return *format;
}

// detectron2's converter and backbones are ResNets': a ViT's keys renamed by its rules ("stem.cls_token",
// "stem.blocks.0...") load into no detectron2 model. The architecture is the checkpoint's saved config's.
// A saved config that cannot be read (written by another version) leaves the tensors' names to tell.
void check_detectron2_arch(const std::string& dir, moco::ckpt::ExportFormat format) {
  if (format != moco::ckpt::ExportFormat::detectron2) return;
  const auto manifest = moco::ckpt::read_manifest(dir);
  std::string vit;
  try {
    const auto arch = moco::run::load_config_text(moco::app::methods(), manifest.config_yaml, dir).model.arch;
    if (moco::run::is_vit(arch)) vit = std::string("model.arch=") + moco::run::to_string(arch);
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
  const auto config = moco::run::load_config_text(moco::app::methods(), reader.manifest().config_yaml, reader.dir());
  const auto info = moco::app::official_checkpoint_info(config, reader.manifest());
  const auto summary = moco::ckpt::export_official(dir, out, moco::app::official_layout_for(config), info);
  std::cout << fmt::format(
      "{}: {} tensors ({:.2f} MiB) from {} (step {}, epoch {}), format moco: main_moco.py's "
      "checkpoint of MoCo {}, arch {}\n",
      out, summary.tensors, summary.bytes / 1048576.0, dir, summary.step, reader.manifest().epoch, config.model.method,
      info.arch);
  if (const auto note = moco::app::official_arch_note(config); !note.empty())
    std::cerr << "moco_ckpt: " << note << "\n";
  return 0;
}

int export_checkpoint(const std::string& path, const std::string& out, const std::string& module,
                      const std::string& format_name, bool keep_head, bool force, bool module_given) {
  const auto format = check_export_format(format_name, out);
  if (format == moco::ckpt::ExportFormat::moco && (module_given || keep_head))
    throw Refusal(
        "export: --format moco writes the whole model, as main_moco.py saves it: --module and --keep-head "
        "do not apply");
  const auto dir = moco::ckpt::resolve_checkpoint_dir(path);
  check_export_target(path, dir, out, force);
  if (format != moco::ckpt::ExportFormat::moco) check_export_module(dir, module);
  check_detectron2_arch(dir, format);
  for (const auto& stale : moco::sys::remove_stale_temporaries(out))
    std::cerr << "moco_ckpt: removed " << stale << ", left by an interrupted export\n";
  if (format == moco::ckpt::ExportFormat::moco) return export_official(dir, out);
  // The official detectron2 converter keeps every encoder_q key, the head's as stem.fc.*.
  const bool all_keys = keep_head || format == moco::ckpt::ExportFormat::detectron2;
  // The head is a ResNet's fc or a ViT's head (timm's name; the official main_lincls.py drops it too).
  const auto summary = moco::ckpt::export_module(
      dir, module, all_keys ? std::vector<std::string>{} : std::vector<std::string>{"fc.", "head."}, out, format);
  std::cout << fmt::format("{}: {} tensors of {} ({:.2f} MiB) from {} (step {}), format {}\n", out, summary.tensors,
                           module, summary.bytes / 1048576.0, dir, summary.step, format_name);
  return 0;
}

// Every --ignore compiled before any checkpoint is read: a bad one is the command line's fault.
std::vector<std::regex> ignore_patterns(const std::vector<std::string>& ignore) {
  std::vector<std::regex> patterns;
  for (const auto& p : ignore) try {
      patterns.emplace_back(p);
    } catch (const std::regex_error& e) {
      throw Refusal(fmt::format("diff: --ignore '{}' is not a regular expression: {}", p, e.what()));
    }
  return patterns;
}

// The model.* keys of a checkpoint's saved config ("model.arch=resnet18 ..."), or empty if it cannot
// be read: two checkpoints that differ here differ in every tensor's shape, for one reason.
std::string architecture_of(const CheckpointReader& reader) {
  try {
    const auto c = moco::run::load_config_text(moco::app::methods(), reader.manifest().config_yaml, reader.dir());
    return fmt::format("model.arch={} model.width={} model.small_stem={} model.dim={}{}", c.model.arch, c.model.width,
                       c.model.small_stem, c.model.dim, moco::run::method_keys_text(c, "model"));
  } catch (const std::exception&) {
    return {};
  }
}

// The elements of a and b (same shape and dtype) that differ, as a mask; undefined when none does. A NaN
// equals a NaN at the same position: progress/knn_random_init is NaN until the run's first kNN, and a
// checkpoint compared with itself is equal (NaN != NaN made `diff A A` fail).
torch::Tensor differing_elements(const torch::Tensor& a, const torch::Tensor& b) {
  if (torch::equal(a, b)) return {};
  auto differs = a != b;
  if (a.is_floating_point()) differs &= ~(a.isnan() & b.isnan());
  return differs.any().item<bool>() ? differs : torch::Tensor();
}

// Bitwise comparison by name (rank-local tensors by name and shard); exit 1 on any difference.
// With atol > 0, tensors whose elements all lie within atol of each other count as equal (and the
// largest such difference is reported).
int diff(const std::string& path_a, const std::string& path_b, const std::vector<std::string>& ignore, double atol) {
  const auto patterns = ignore_patterns(ignore);
  CheckpointReader a(moco::ckpt::resolve_checkpoint_dir(path_a)), b(moco::ckpt::resolve_checkpoint_dir(path_b));
  const auto arch_a = architecture_of(a), arch_b = architecture_of(b);
  if (!arch_a.empty() && !arch_b.empty() && arch_a != arch_b)
    std::cout << fmt::format("the architectures differ: {} has {}, {} has {}\n", a.dir(), arch_a, b.dir(), arch_b);
  auto ignored = [&](const std::string& name) {
    for (const auto& p : patterns)
      if (std::regex_search(name, p)) return true;
    return false;
  };
  auto key = [](const moco::ckpt::TensorRecord& t) {
    return t.rank_local ? fmt::format("{}@{}", t.name, t.shard) : t.name;
  };
  std::map<std::string, const moco::ckpt::TensorRecord*> in_b;
  for (const auto& t : b.manifest().tensors) in_b[key(t)] = &t;
  int differing = 0, compared = 0;
  double largest_tolerated = 0;
  std::string largest_name;
  for (const auto& t : a.manifest().tensors) {
    if (ignored(t.name)) {
      in_b.erase(key(t));
      continue;
    }
    const auto it = in_b.find(key(t));
    if (it == in_b.end()) {
      std::cout << "only in " << a.dir() << ": " << key(t) << "\n";
      ++differing;
      continue;
    }
    const auto ta = a.read(t), tb = b.read(*it->second);
    in_b.erase(it);
    ++compared;
    if (ta.sizes() != tb.sizes() || ta.scalar_type() != tb.scalar_type()) {
      std::cout << fmt::format("{}: {} {} vs {} {}\n", key(t), t.dtype, shape_text(ta.sizes().vec()),
                               moco::ckpt::dtype_name(tb.scalar_type()), shape_text(tb.sizes().vec()));
      ++differing;
    } else if (const auto differs = differing_elements(ta, tb); differs.defined()) {
      const auto fa = ta.to(torch::kFloat64), fb = tb.to(torch::kFloat64);
      const double largest = (fa - fb).abs().masked_select(differs).max().item<double>();
      if (largest <= atol) {
        if (largest >= largest_tolerated) largest_tolerated = largest, largest_name = key(t);
        continue;
      }
      std::cout << fmt::format("{}: differs, max |a-b| {:.3g} over {} of {} elements\n", key(t), largest,
                               differs.sum().item<int64_t>(), ta.numel());
      ++differing;
    }
  }
  for (const auto& [name, record] : in_b)
    if (!ignored(record->name)) {
      std::cout << "only in " << b.dir() << ": " << name << "\n";
      ++differing;
    }
  std::cout << fmt::format("{} tensors compared, {} differ{}{}\n", compared, differing,
                           atol > 0 ? fmt::format(" by more than {:g}; largest tolerated difference {:.3g} ({})", atol,
                                                  largest_tolerated, largest_name)
                                    : "",
                           ignore.empty() ? "" : fmt::format(" (ignored: {})", fmt::join(ignore, ", ")));
  // No tensor compared is no evidence of sameness (every one ignored, or no name in common).
  if (compared == 0) std::cout << "nothing was compared: the checkpoints are not shown to be equal\n";
  return differing == 0 && compared > 0 ? 0 : 1;
}

// CLI11 answers a misspelt subcommand ("moco_ckpt verfy RUN") with "A subcommand is required",
// naming neither the word nor the subcommands: said here, before the parse.
std::string unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  std::string names;
  for (const auto* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == argv[1]) return "";
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return "'" + std::string(argv[1]) + "' is not a subcommand: " + names + " (moco_ckpt --help)";
}

}  // namespace

int main(int argc, char** argv) {
  moco::app::start_process();
  CLI::App app{
      "moco_ckpt: inspect, verify, export and compare moco_dist checkpoints.\n"
      "CHECKPOINT is a checkpoint folder (output_dir/checkpoints/step_<n>), a checkpoints folder or a run's\n"
      "output_dir (both meaning the checkpoint `latest` names)."};
  app.require_subcommand(1);
  std::string a, b, out, module = "encoder_q", format = "h5";
  bool keep_head = false, force = false;
  std::vector<std::string> ignore;
  double atol = 0;
  auto* inspect_cmd = app.add_subcommand(
      "inspect", "metadata, shards, every tensor (name, dtype, shape, shard, CRC-32), the saved config");
  inspect_cmd->add_option("CHECKPOINT", a)->required();
  auto* verify_cmd = app.add_subcommand(
      "verify", "read every tensor and check its checksums; exit 1 naming the first bad tensor and file");
  verify_cmd->add_option("CHECKPOINT", a)->required();
  auto* export_cmd = app.add_subcommand(
      "export",
      "write the query encoder's backbone as torchvision (ResNet) or timm (ViT) state_dict keys, without the head\n"
      "(fc, head), to OUT: HDF5, a torch.load\n"
      "file (torchvision, timm) or detectron2's weights (the official MoCo converter's keys, fc head included);\n"
      "or, --format moco, the whole checkpoint as the official main_moco.py saves it (for its --resume,\n"
      "main_lincls.py --pretrained, convert-pretrain-to-detectron2.py, convert_to_deit.py)");
  export_cmd->add_option("CHECKPOINT", a)->required();
  export_cmd->add_option("OUT", out, "output file (.h5, .pth, .pth.tar; for detectron2 .pth, not .pkl)")->required();
  export_cmd
      ->add_option("--format", format,
                   "h5 (datasets named by key), torch (a dict for torch.load and load_state_dict), detectron2\n"
                   "(for MODEL.WEIGHTS: a torch.load file of {model, __author__ MOCO, matching_heuristics}) or moco\n"
                   "(main_moco.py's {epoch, arch, state_dict, optimizer(, scaler)}, DistributedDataParallel's names)")
      ->capture_default_str();
  export_cmd->add_option("--module", module, "which module to export")->capture_default_str();
  export_cmd->add_flag("--keep-head", keep_head, "keep the head (fc, or a ViT's head) as well");
  export_cmd->add_flag("--force", force, "replace OUT if it exists (atomically: the old file until the new is whole)");
  auto* diff_cmd =
      app.add_subcommand("diff", "compare two checkpoints tensor by tensor, bitwise; exit 1 if any differs");
  diff_cmd->add_option("A", a)->required();
  diff_cmd->add_option("B", b)->required();
  diff_cmd->add_option(
      "--ignore", ignore,
      "skip tensors whose name this regular expression matches (e.g. progress/train_seconds, a wall-clock time)");
  diff_cmd->add_option("--atol", atol, "tolerate element differences up to this (default 0: bitwise)")
      ->check(CLI::Validator(
          [](std::string& v) {
            // A non-number is left to CLI11's own conversion message.
            return std::strtod(v.c_str(), nullptr) >= 0 ? std::string() : "must be >= 0, not " + v;
          },
          "X>=0"));
  app.footer(
      "Exit codes: 0 ok, 1 a checkpoint is missing, corrupt, uncommitted (step_<n>.tmp) or differs, or diff compared\n"
      "nothing, 2 bad command line (a bad --ignore or --format, an OUT whose suffix names another format, an export\n"
      "OUT that is empty, inside the checkpoint or the run it reads, a folder, an existing file without --force, or\n"
      "not a regular file; nothing written). An interrupted export (SIGINT, SIGTERM, SIGHUP)\n"
      "removes its temporary file OUT.tmp-<pid>; one a killed export left is removed by the next export to OUT.");
  if (const auto unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
    std::cerr << "moco_ckpt: " << unknown << "\n";
    return 2;
  }
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;
  return moco::app::run_tool("moco_ckpt", [&] {
    if (*inspect_cmd) return inspect(a);
    if (*verify_cmd) return verify(a);
    if (*export_cmd)
      return export_checkpoint(a, out, module, format, keep_head, force, export_cmd->count("--module") > 0);
    if (*diff_cmd) return diff(a, b, ignore, atol);
    return 2;
  });
}
