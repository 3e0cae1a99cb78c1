// moco_pack: packs the splits of an ImageFolder into HDF5 shards that moco_dist trains from
// (data.dataset: hdf5). The images' bytes are stored as they are, not decoded.
#include "app/parse_command_line.h"
#include "data/file_list_cache.h"
#include "data/image_folder.h"
#include "data/image_pack.h"
#include "sys/host_memory.h"
#include "sys/openblas_kernels.h"
#include "sys/paths.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  moco::sys::keep_freed_host_memory();
  CLI::App app{
      "moco_pack: packs the ImageFolder splits SRC/train and SRC/val into HDF5 shards OUT/train-SSSSS-of-NNNNN.h5 and\n"
      "OUT/val-SSSSS-of-NNNNN.h5, for moco_dist with data.dataset=hdf5 data.root=OUT. Each shard holds the image "
      "files'\n"
      "bytes unchanged, their labels, offsets and sizes, the class names and the files' paths under SRC/<split>.\n"
      "Samples go to the shards contiguously in ImageFolder order (shard 0 the first N/shards), so the shards give\n"
      "the same samples in the same order as the folder. Written under temporary names and renamed only when every\n"
      "shard is complete: a failed pack leaves no shard. OUT/<split>.complete, written last, says the split's pack\n"
      "is whole: without it (a pack killed while renaming) readers refuse the split; re-run moco_pack --overwrite."};
  std::string src, out;
  int shards = 1, threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::string> splits{"train", "val"};
  bool overwrite = false;
  app.add_option("SRC", src, "the ImageFolder's root, holding one folder per split")->required();
  app.add_option("OUT", out, "the folder for the shards (made if missing)")->required();
  app.add_option("--shards", shards, "shards per split (at most its number of images)")
      ->default_val(1)
      ->check(CLI::Range(1, 99999));
  app.add_option("--threads", threads, "shards written at once (default: the hardware's threads)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--split", splits, "the splits: folders under SRC, and the shards' prefix")->capture_default_str();
  app.add_flag("--overwrite", overwrite,
               "replace shards of these splits already in OUT (once the new ones are complete)");
  app.footer(
      "Exit codes: 0 done, 1 failed while packing (a file that cannot be read or written; no shard is left), 2 bad\n"
      "command line, SRC not an ImageFolder, OUT inside SRC, or OUT holding shards of a split already (without\n"
      "--overwrite). Temporary shards an interrupted pack left in OUT are removed by the next pack, which says so.");
  if (const auto code = moco::app::parse_command_line(app, argc, argv)) return *code;

  if (moco::sys::lies_within(out, src)) {
    std::cerr << "moco_pack: OUT " << out << " lies inside SRC " << src
              << ", which it reads: write the shards elsewhere\n";
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<moco::data::SplitToPack> todo;
  try {
    for (const auto& split : splits)
      todo.push_back(
          {split, moco::data::scan_image_folder_cached((std::filesystem::path(src) / split).string()).folder});
    for (size_t i = 1; i < todo.size(); ++i)
      if (todo[i].folder.classes != todo[0].folder.classes)
        throw moco::data::FolderError(todo[i].folder.root + ": its " + std::to_string(todo[i].folder.classes.size()) +
                                      " classes are not the " + std::to_string(todo[0].folder.classes.size()) + " of " +
                                      todo[0].folder.root);
    moco::data::PackOptions options;
    options.shards = shards;
    options.threads = threads;
    options.overwrite = overwrite;
    const auto packed = moco::data::pack_image_folders(todo, out, options);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& p : packed)
      std::cout << fmt::format("{}: {} images, {} classes, {} shard(s), {:.1f} MiB: {} .. {}\n", p.name, p.images,
                               todo[0].folder.classes.size(), p.files.size(), static_cast<double>(p.bytes) / 1048576.0,
                               p.files.front(), p.files.back());
    std::cout << fmt::format("packed in {:.1f} s, up to {} shard(s) at a time\n", seconds, threads);
  } catch (const moco::data::FolderError& e) {
    std::cerr << "moco_pack: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "moco_pack: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
