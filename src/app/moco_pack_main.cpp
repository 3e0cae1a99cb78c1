// moco_pack: packs the splits of an ImageFolder into HDF5 shards that moco_dist trains from
// (data.dataset: hdf5). The images' bytes are stored as they are, not decoded.
#include "app/parse_command_line.h"
#include "app/program.h"
#include "data/file_list_cache.h"
#include "data/image_folder.h"
#include "data/image_pack.h"
#include "sys/folder_lock.h"
#include "sys/paths.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <set>
#include <stdexcept>
#include <thread>

namespace {

namespace fs = std::filesystem;

struct Args {
  std::string src, out;
  int shards = 1, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> splits{"train", "val"};
  bool overwrite = false;
};

using moco::app::Refusal;  // a request refused before any work: exit 2, nothing written

void add_options(CLI::App& app, Args& a) {
  app.add_option("SRC", a.src, "the ImageFolder's root, holding one folder per split")->required();
  app.add_option("OUT", a.out, "the folder for the shards (made if missing)")->required();
  app.add_option("--shards", a.shards, "shards per split (at most its number of images)")
      ->default_val(1)
      ->check(CLI::Range(1, 99999));
  app.add_option("--threads", a.threads, "shards written at once (default: the hardware's threads)")
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) {
            // A non-number is left to CLI11's own conversion message.
            char* end = nullptr;
            const long n = std::strtol(v.c_str(), &end, 10);
            return end == v.c_str() || *end != '\0' || n >= 1 ? std::string()
                                                              : "the shards written at once: at least 1, not " + v;
          },
          "N>=1"));
  app.add_option("--split", a.splits, "the splits: folders under SRC, and the shards' prefix")->capture_default_str();
  app.add_flag("--overwrite", a.overwrite,
               "replace shards of these splits already in OUT (once the new ones are complete)");
}

// A split names a folder under SRC and the shards' prefix in OUT: a plain name, or "../x" and "/x"
// would read and write outside them; and each once, or one split's shards would be packed twice
// under the same names.
void check_splits(const std::vector<std::string>& splits) {
  std::set<std::string> seen;
  for (const auto& split : splits) {
    const bool plain = !split.empty() && split != "." && split != ".." &&
                       split.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") ==
                           std::string::npos;
    if (!plain)
      throw Refusal("--split '" + split +
                    "': not a plain name (letters, digits, '.', '_', '-'; not . or ..): it names a folder of SRC and "
                    "the shards' prefix in OUT");
    if (!seen.insert(split).second) throw Refusal("--split '" + split + "' is given twice");
  }
}

std::vector<moco::data::SplitToPack> scan_splits(const Args& a) {
  std::vector<moco::data::SplitToPack> todo;
  for (const auto& split : a.splits)
    todo.push_back({split, moco::data::scan_image_folder_cached((fs::path(a.src) / split).string()).folder});
  for (size_t i = 1; i < todo.size(); ++i)
    if (todo[i].folder.classes != todo[0].folder.classes)
      throw moco::data::FolderError(todo[i].folder.root + ": its " + std::to_string(todo[i].folder.classes.size()) +
                                    " classes are not the " + std::to_string(todo[0].folder.classes.size()) + " of " +
                                    todo[0].folder.root);
  return todo;
}

// OUT, made if missing, locked for the pack's life: a second pack into it would mix its shards with
// this one's. A refusal found later takes back a folder made here (only if it is still empty).
class LockedOut {
 public:
  explicit LockedOut(const std::string& out) : out_(out) {
    std::error_code ec;
    made_ = !fs::exists(out, ec);
    fs::create_directories(out, ec);
    if (ec) throw std::runtime_error(out + ": cannot create the folder: " + ec.message());
    if (const auto holder = lock_.acquire(out)) {
      take_back();
      throw Refusal("OUT " + out + " is in use by another pack: " + moco::sys::describe_lock_holder(*holder) +
                    " holds its lock " + lock_.path() + ": wait for it to end");
    }
    if (!lock_.unsupported().empty())
      std::cerr << "moco_pack: " << lock_.unsupported() << "; a second pack into " << out << " would not be noticed\n";
  }
  void take_back() {
    lock_.release();
    std::error_code ec;
    if (made_) fs::remove(out_, ec);  // only if empty
  }

 private:
  std::string out_;
  bool made_ = false;
  moco::sys::FolderLock lock_;
};

int pack(const Args& a) {
  const auto start = std::chrono::steady_clock::now();
  const auto todo = scan_splits(a);
  LockedOut locked(a.out);
  moco::data::PackOptions options;
  options.shards = a.shards;
  options.threads = a.threads;
  options.overwrite = a.overwrite;
  std::vector<moco::data::PackedSplit> packed;
  try {
    packed = moco::data::pack_image_folders(todo, a.out, options);
  } catch (const moco::data::FolderError&) {
    locked.take_back();
    throw;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& p : packed)
    std::cout << fmt::format("{}: {} images, {} classes, {} shard(s), {:.1f} MiB: {} .. {}\n", p.name, p.images,
                             todo[0].folder.classes.size(), p.files.size(), static_cast<double>(p.bytes) / 1048576.0,
                             p.files.front(), p.files.back());
  std::cout << fmt::format("packed in {:.1f} s, up to {} shard(s) at a time\n", seconds, a.threads);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  moco::app::start_process();
  CLI::App app{
      "moco_pack: packs the ImageFolder splits SRC/train and SRC/val into HDF5 shards OUT/train-SSSSS-of-NNNNN.h5 and\n"
      "OUT/val-SSSSS-of-NNNNN.h5, for moco_dist with data.dataset=hdf5 data.root=OUT. Each shard holds the image "
      "files'\n"
      "bytes unchanged, their labels, offsets and sizes, the class names and the files' paths under SRC/<split>.\n"
      "Samples go to the shards contiguously in ImageFolder order (shard 0 the first N/shards), so the shards give\n"
      "the same samples in the same order as the folder. Written under temporary names and renamed only when every\n"
      "shard is complete: a failed pack leaves no shard. OUT/<split>.complete, written last, says the split's pack\n"
      "is whole: without it (a pack killed while renaming) readers refuse the split; re-run moco_pack --overwrite."};
  Args a;
  add_options(app, a);
  app.footer(
      "Exit codes: 0 done (also when SIGTERM, SIGINT or SIGHUP came while the shards were renamed: the pack is whole\n"
      "then, and it says so), 1 failed while packing (a file that cannot be read or written; no shard is left), 2 bad\n"
      "command line (a --split that is not a plain name, or given twice), SRC not an ImageFolder, OUT inside SRC,\n"
      "OUT holding shards of a split already (without --overwrite), or OUT in use by another pack (OUT/moco.lock).\n"
      "Temporary shards an interrupted pack left in OUT are removed by the next pack, which says so.");
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;
  return moco::app::run_tool(
      "moco_pack",
      [&] {
        if (moco::sys::lies_within(a.out, a.src))
          throw Refusal("OUT " + a.out + " lies inside SRC " + a.src + ", which it reads: write the shards elsewhere");
        check_splits(a.splits);
        return pack(a);
      },
      // SRC not an ImageFolder is a refusal too.
      [](const std::exception& e) { return dynamic_cast<const moco::data::FolderError*>(&e) != nullptr; });
}
