// bench_data: images per second of one thread decoding JPEGs and making MoCo v2's two 224 px views
// (encoded_train_views) with the PIL-equal transforms (the default), the tensor ones, and the PIL ones
// with the DCT scaling; bench_data_torchvision.py times the
// official torchvision + PIL transform on the same files. Then the loader (TwoViewLoader, v2 views,
// batches of 16) on the same files as an ImageFolder (4 classes, copied to a scratch folder) and
// packed into 2 HDF5 shards (moco_pack's pack_image_folders): images/s delivered with 1 and 2
// workers, epochs of the two sources alternated, and their ratios.
// With --peer it runs that script on the same files in the same command and prints the ratio; it
// also reports how far data.dct_scaling moves the views' values from the full-size decode.
//   build/bench_data DIR [--rounds N] [--peer bench/bench_data_torchvision.py]   (DIR: *.jpg, e.g. 500x375 photos;
//   --help) build/bench_data --epoch-order SIZE   (an epoch start's cost on a split of SIZE images:
//   bench/start_at_scale.sh)
#include "data/augment.h"
#include "data/encoded_views.h"
#include "data/image_folder.h"
#include "data/image_pack.h"
#include "data/image_shards.h"
#include "data/loader.h"
#include "sys/openblas_kernels.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

// Images/s of `rounds` epochs through the loader, each source's epochs alternated with the other's.
void loader_bench(const std::vector<std::filesystem::path>& files, const moco::data::AugmentOptions& o, int rounds) {
  using namespace moco::data;
  namespace fs = std::filesystem;
  const fs::path scratch = fs::temp_directory_path() / ("moco_bench_data_" + std::to_string(::getpid()));
  fs::remove_all(scratch);
  for (size_t i = 0; i < files.size(); ++i) {
    const fs::path to = scratch / "folder" / "train" / ("class_" + std::to_string(i % 4)) / files[i].filename();
    fs::create_directories(to.parent_path());
    fs::copy_file(files[i], to);
  }
  PackOptions pack;
  pack.shards = 2;
  pack_image_folders({{"train", scan_image_folder((scratch / "folder" / "train").string())}},
                     (scratch / "packed").string(), pack);
  const std::shared_ptr<const Dataset> sources[2] = {
      std::make_shared<ImageFolderDataset>(scan_image_folder((scratch / "folder" / "train").string()), o.out_size,
                                           o.dct_scaling, o.transforms),
      std::make_shared<EncodedImageDataset>(std::make_shared<ImageShardSource>((scratch / "packed").string(), "train"),
                                            o.out_size, o.dct_scaling, o.transforms)};
  const char* names[2] = {"ImageFolder", "HDF5 shards"};
  double rate[2][2] = {};  // [workers - 1][source]
  for (int workers = 1; workers <= 2; ++workers) {
    LoaderOptions lo;
    lo.batch_size = 16;
    lo.workers = workers;
    lo.prefetch = 2;
    double seconds[2] = {0, 0};
    int64_t images[2] = {0, 0};
    for (int r = 0; r < rounds; ++r)
      for (int s = 0; s < 2; ++s) {
        TwoViewLoader loader(sources[s], o, lo);
        const auto start = std::chrono::steady_clock::now();
        loader.start_epoch(r);
        while (auto batch = loader.next()) images[s] += batch->query.size(0);
        seconds[s] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
    for (int s = 0; s < 2; ++s) {
      rate[workers - 1][s] = static_cast<double>(images[s]) / seconds[s];
      std::cout << "loader, " << names[s] << ", " << workers << " worker(s): " << rate[workers - 1][s] << " images/s ("
                << images[s] << " images)\n";
    }
    std::cout << "  HDF5 shards / ImageFolder at " << workers
              << " worker(s): " << rate[workers - 1][1] / rate[workers - 1][0] << "\n";
  }
  for (int s = 0; s < 2; ++s)
    std::cout << "  2 workers / 1 worker, " << names[s] << ": " << rate[1][s] / rate[0][s] << "\n";
  fs::remove_all(scratch);
}

// Images/s of one thread making both v2 views of every file `rounds` times (decode included).
double views_per_second(const std::vector<std::vector<uint8_t>>& files, const moco::data::AugmentOptions& o, bool dct,
                        int rounds) {
  using namespace moco::data;
  std::vector<float> query(static_cast<size_t>(3 * o.out_size * o.out_size)), key(query.size());
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < files.size(); ++i) {
      const uint64_t query_seed = view_seed(0, r, static_cast<int64_t>(i), 0),
                     key_seed = view_seed(0, r, static_cast<int64_t>(i), 1);
      encoded_train_views(files[i].data(), files[i].size(), o, dct, query_seed, query.data(), &key_seed, key.data());
    }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double rate = static_cast<double>(rounds) * static_cast<double>(files.size()) / seconds;
  std::cout << "moco_dist, data.transforms=" << (o.transforms == Transforms::kPil ? "pil   " : "tensor")
            << " data.dct_scaling=" << (dct ? "true " : "false") << ": " << rate
            << " images/s (decode + two v2 views at " << o.out_size << ", one thread, " << files.size() << " files x "
            << rounds << ")\n";
  return rate;
}

// How far the DCT-scaled decode moves the views: the same seeds with and without it, every value
// of every view compared in uint8 levels (the normalised difference times 255 std).
void report_dct_deviation(const std::vector<std::vector<uint8_t>>& files, const moco::data::AugmentOptions& o) {
  using namespace moco::data;
  const size_t plane = static_cast<size_t>(o.out_size * o.out_size);
  std::vector<float> scaled(3 * plane), full(3 * plane);
  int64_t values = 0, equal = 0, within_one = 0;
  double sum = 0, largest = 0;
  for (size_t i = 0; i < files.size(); ++i)
    for (int view = 0; view < 2; ++view) {
      const uint64_t seed = view_seed(0, 0, static_cast<int64_t>(i), view);
      encoded_train_views(files[i].data(), files[i].size(), o, true, seed, scaled.data(), nullptr, nullptr);
      encoded_train_views(files[i].data(), files[i].size(), o, false, seed, full.data(), nullptr, nullptr);
      for (size_t k = 0; k < scaled.size(); ++k) {
        const double levels = std::fabs(scaled[k] - full[k]) * o.std[k / plane] * 255.0;
        ++values;
        equal += levels < 0.5;
        within_one += levels < 1.5;
        sum += levels;
        largest = std::max(largest, levels);
      }
    }
  std::cout << "data.dct_scaling=true against the full-size decode, same views: " << 100.0 * equal / values
            << "% of values equal, " << 100.0 * within_one / values << "% within one level, mean " << sum / values
            << " levels, largest " << std::lround(largest) << " (" << values << " values)\n";
}

// Runs the Python peer (bench_data_torchvision.py) on the same folder and reads its images/s.
double peer_images_per_second(const std::string& script, const std::string& dir, int rounds) {
  const std::string command = "/usr/bin/python3 " + script + " " + dir + " --rounds " + std::to_string(rounds);
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("bench_data: cannot run " + command);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) output += buffer;
  if (::pclose(pipe) != 0) throw std::runtime_error("bench_data: " + command + " failed:\n" + output);
  std::cout << output;
  const auto colon = output.find(": ");
  if (colon == std::string::npos) throw std::runtime_error("bench_data: no images/s in the peer's output: " + output);
  return std::stod(output.substr(colon + 2));
}

}  // namespace

// --epoch-order SIZE: what an epoch's start costs each rank of 2 on a split of SIZE images (the
// shuffled order and its share, all that grows with the split), the median of 5 epochs, in ms.
int epoch_order_bench(int64_t size) {
  moco::data::LoaderOptions o;
  o.batch_size = 128;
  o.world_size = 2;
  std::vector<double> ms;
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const auto order = moco::data::epoch_order(size, o, epoch);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (order.empty()) return 1;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("epoch_order: %lld images, 2 ranks: %.2f ms a rank (median of 5 epochs)\n", static_cast<long long>(size),
              ms[2]);
  return 0;
}

int main(int argc, char** argv) {
  moco::sys::restart_with_openblas_settings();  // may re-execute this program first (src/sys/openblas_kernels.h)
  using namespace moco::data;
  CLI::App app{
      "bench_data: one thread's PIL-equal v2 views of JPEGs (against torchvision + PIL with --peer), "
      "then the loader on an ImageFolder against HDF5 shards; or an epoch start's cost"};
  std::string dir, peer;
  int rounds = 4;
  int64_t epoch_order_size = -1;
  app.add_option("DIR", dir, "a folder of .jpg files (e.g. 500x375 photos: bench_data_torchvision.py DIR --make 64)");
  app.add_option("--rounds", rounds, "epochs over the files per timing")->check(CLI::PositiveNumber);
  app.add_option("--peer", peer, "bench/bench_data_torchvision.py: time the official transforms on DIR too");
  app.add_option("--epoch-order", epoch_order_size,
                 "instead: an epoch start's cost (shuffled order, each rank's share) on a split of this many images")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  if (epoch_order_size >= 0) return epoch_order_bench(epoch_order_size);
  if (dir.empty() || !std::filesystem::is_directory(dir)) {
    std::cerr << "bench_data: DIR '" << dir << "' is not a folder of .jpg files (--help says more)\n";
    return 2;
  }
  std::vector<std::vector<uint8_t>> files;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".jpg" && e.path().extension() != ".JPEG" && e.path().extension() != ".jpeg") continue;
    paths.push_back(e.path());
    std::ifstream in(e.path(), std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (files.empty()) {
    std::cerr << "bench_data: no .jpg files in " << dir << "\n";
    return 2;
  }
  AugmentOptions o;  // v2 aug+ as configs/moco_v2_r50_imagenet.yaml (PIL transforms, full-size decode)
  o.recipe = Recipe::kV2;
  o.out_size = 224;
  o.mean = {0.485, 0.456, 0.406};
  o.std = {0.229, 0.224, 0.225};
  o.dct_scaling = false;
  o.transforms = Transforms::kPil;
  AugmentOptions tensor = o;
  tensor.transforms = Transforms::kTensor;
  const double rate_pil = views_per_second(files, o, false, rounds);
  const double rate_tensor = views_per_second(files, tensor, false, rounds);
  const double rate_dct = views_per_second(files, o, true, rounds);
  report_dct_deviation(files, o);
  if (!peer.empty()) {
    // The peer runs between two more timings of ours, so that a drift of the machine shows.
    const double theirs = peer_images_per_second(peer, dir, rounds);
    const double again = views_per_second(files, o, false, rounds);
    std::cout << "moco_dist / torchvision + PIL, the same PIL-equal views, both decoding at full size: "
              << rate_pil / theirs << " before, " << again / theirs
              << " after the peer; data.transforms=tensor: " << rate_tensor / theirs
              << "; data.dct_scaling=true: " << rate_dct / theirs << "\n";
  }
  loader_bench(paths, o, rounds);
  return 0;
}
