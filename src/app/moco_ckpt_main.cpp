// moco_ckpt: inspect, verify, export (app/ckpt_export.h) and diff moco_dist checkpoints.
#include "app/ckpt_export.h"
#include "app/methods.h"
#include "app/parse_command_line.h"
#include "app/program.h"
#include "ckpt/checkpoint_dir.h"
#include "ckpt/export.h"
#include "ckpt/h5_tensor_file.h"
#include "ckpt/manifest.h"
#include "run/config.h"

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

// The model.* keys of a checkpoint's saved config ("model.method=<name> model.arch=resnet18 ..."), or empty if it
// cannot be read: two checkpoints that differ here differ in every tensor's shape, for one reason.
std::string architecture_of(const CheckpointReader& reader) {
  try {
    const auto c = moco::run::load_config_text(moco::app::methods(), reader.manifest().config_yaml, reader.dir());
    return fmt::format("model.method={} model.arch={} model.width={} model.small_stem={} model.dim={}{}",
                       c.model.method, c.model.arch, c.model.width, c.model.small_stem, c.model.dim,
                       moco::run::method_keys_text(c, "model"));
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

// What the command line asks: the subcommand given and its arguments.
struct Request {
  CLI::App *inspect = nullptr, *verify = nullptr, *export_ = nullptr, *diff = nullptr;
  std::string a, b;  // CHECKPOINT (or A), B
  moco::app::ExportRequest export_request;
  std::vector<std::string> ignore;
  double atol = 0;
};

void add_export(CLI::App& app, Request& r) {
  auto& e = r.export_request;
  r.export_ = app.add_subcommand(
      "export",
      "write the query encoder's backbone as torchvision (ResNet) or timm (ViT) state_dict keys, without the head\n"
      "(fc, head), to OUT: HDF5, a torch.load\n"
      "file (torchvision, timm) or detectron2's weights (the official MoCo converter's keys, fc head included);\n"
      "or, --format moco, the whole checkpoint as the official main_moco.py saves it (for its --resume,\n"
      "main_lincls.py --pretrained, convert-pretrain-to-detectron2.py, convert_to_deit.py)");
  r.export_->add_option("CHECKPOINT", e.checkpoint)->required();
  r.export_->add_option("OUT", e.out, "output file (.h5, .pth, .pth.tar; for detectron2 .pth, not .pkl)")->required();
  r.export_
      ->add_option("--format", e.format,
                   "h5 (datasets named by key), torch (a dict for torch.load and load_state_dict), detectron2\n"
                   "(for MODEL.WEIGHTS: a torch.load file of {model, __author__ MOCO, matching_heuristics}) or moco\n"
                   "(main_moco.py's {epoch, arch, state_dict, optimizer(, scaler)}, DistributedDataParallel's names)")
      ->capture_default_str();
  r.export_->add_option("--module", e.module,
                        "which module to export (default: the query encoder, the one its method's evaluation reads)");
  r.export_->add_flag("--keep-head", e.keep_head, "keep the head (fc, or a ViT's head) as well");
  r.export_->add_flag("--force", e.force, "replace OUT if it exists (atomically: the old file until the new is whole)");
}

void add_diff(CLI::App& app, Request& r) {
  r.diff = app.add_subcommand("diff", "compare two checkpoints tensor by tensor, bitwise; exit 1 if any differs");
  r.diff->add_option("A", r.a)->required();
  r.diff->add_option("B", r.b)->required();
  r.diff->add_option(
      "--ignore", r.ignore,
      "skip tensors whose name this regular expression matches (e.g. progress/train_seconds, a wall-clock time)");
  r.diff->add_option("--atol", r.atol, "tolerate element differences up to this (default 0: bitwise)")
      ->check(CLI::Validator(
          [](std::string& v) {
            // A non-number is left to CLI11's own conversion message.
            return std::strtod(v.c_str(), nullptr) >= 0 ? std::string() : "must be >= 0, not " + v;
          },
          "X>=0"));
}

void add_subcommands(CLI::App& app, Request& r) {
  app.require_subcommand(1);
  r.inspect = app.add_subcommand(
      "inspect", "metadata, shards, every tensor (name, dtype, shape, shard, CRC-32), the saved config");
  r.inspect->add_option("CHECKPOINT", r.a)->required();
  r.verify = app.add_subcommand(
      "verify", "read every tensor and check its checksums; exit 1 naming the first bad tensor and file");
  r.verify->add_option("CHECKPOINT", r.a)->required();
  add_export(app, r);
  add_diff(app, r);
  app.footer(
      "Exit codes: 0 ok, 1 a checkpoint is missing, corrupt, uncommitted (step_<n>.tmp) or differs, or diff compared\n"
      "nothing, 2 bad command line (a bad --ignore or --format, an OUT whose suffix names another format, an export\n"
      "OUT that is empty, inside the checkpoint or the run it reads, a folder, an existing file without --force, or\n"
      "not a regular file; nothing written). An interrupted export (SIGINT, SIGTERM, SIGHUP)\n"
      "removes its temporary file OUT.tmp-<pid>; one a killed export left is removed by the next export to OUT.");
}

int run_request(const Request& r) {
  if (*r.inspect) return inspect(r.a);
  if (*r.verify) return verify(r.a);
  if (*r.export_) return moco::app::export_checkpoint(r.export_request);
  if (*r.diff) return diff(r.a, r.b, r.ignore, r.atol);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  moco::app::start_process();
  CLI::App app{
      "moco_ckpt: inspect, verify, export and compare moco_dist checkpoints.\n"
      "CHECKPOINT is a checkpoint folder (output_dir/checkpoints/step_<n>), a checkpoints folder or a run's\n"
      "output_dir (both meaning the checkpoint `latest` names)."};
  Request request;
  add_subcommands(app, request);
  if (const auto unknown = unknown_subcommand(app, argc, argv); !unknown.empty()) {
    std::cerr << "moco_ckpt: " << unknown << "\n";
    return 2;
  }
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;
  return moco::app::run_tool("moco_ckpt", [&] { return run_request(request); });
}
