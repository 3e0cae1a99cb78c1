#include "data/image_pack.h"

#include "h5/attributes.h"
#include "data/image_shards.h"
#include "sys/durable_file.h"
#include "sys/fault_hooks.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <thread>

namespace moco::data {
namespace fs = std::filesystem;
namespace {

// Buffered bytes per shard between HDF5 writes: large writes, bounded memory per thread.
constexpr int64_t kWriteBatchBytes = 64 << 20;

struct Task {
  const SplitToPack* split;
  int shard, num_shards;
  int64_t begin, end;  // global indices
  std::string final_path, tmp_path;
  int64_t pack_id;  // the same in every shard of this pack and in its markers
};

std::vector<uint8_t> read_source(const std::string& path, int64_t expected) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  std::vector<uint8_t> bytes(static_cast<size_t>(expected));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(expected));
  if (in.gcount() != static_cast<std::streamsize>(expected) || in.peek() != std::char_traits<char>::eof())
    throw std::runtime_error(path + ": changed while packing (its size is no longer " + std::to_string(expected) +
                             " bytes)");
  return bytes;
}

// The HDF5 side of one shard being written; every call holds h5::lock().
class ShardFile {
 public:
  ShardFile(const std::string& path, int64_t total_bytes) : path_(path) {
    auto held = h5::lock();
    h5::init_once();
    h5::Handle access(H5Pcreate(H5P_FILE_ACCESS));
    H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_LATEST);  // checksummed metadata, as the checkpoints
    file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, access.get());
    if (file_ < 0) fail("cannot create the file");
    // Contiguous, unfiltered, allocated at once and never pre-filled: its offset in the file is
    // fixed now, readers pread from it, and each byte is written once.
    const auto n = static_cast<hsize_t>(total_bytes);
    h5::Handle space(H5Screate_simple(1, &n, nullptr));
    h5::Handle create(H5Pcreate(H5P_DATASET_CREATE));
    H5Pset_layout(create.get(), H5D_CONTIGUOUS);
    H5Pset_alloc_time(create.get(), H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(create.get(), H5D_FILL_TIME_NEVER);
    images_ = H5Dcreate2(file_, "images", H5T_STD_U8LE, space.get(), H5P_DEFAULT, create.get(), H5P_DEFAULT);
    if (images_ < 0) {
      const std::string why = h5::error_text();
      close_locked();  // no destructor runs for a constructor that throws
      throw std::runtime_error(path_ + ": cannot create the dataset 'images' of " + std::to_string(total_bytes) +
                               " bytes (HDF5: " + why + ")");
    }
  }
  ~ShardFile() {
    auto held = h5::lock();
    close_locked();
  }
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  void write_bytes(int64_t offset, const std::vector<uint8_t>& bytes) {
    if (bytes.empty()) return;
    auto held = h5::lock();
    const hsize_t start = static_cast<hsize_t>(offset), count = bytes.size();
    h5::Handle file_space(H5Dget_space(images_));
    h5::Handle mem_space(H5Screate_simple(1, &count, nullptr));
    if (H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr) < 0 ||
        H5Dwrite(images_, H5T_NATIVE_UINT8, mem_space.get(), file_space.get(), H5P_DEFAULT, bytes.data()) < 0)
      fail("cannot write the images' bytes");
  }

  void finish(const Task& t, const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
    const ImageFolder& f = t.split->folder;
    std::vector<int64_t> labels(f.labels.begin() + t.begin, f.labels.begin() + t.end);
    std::vector<std::string> paths(f.files.begin() + t.begin, f.files.begin() + t.end);
    auto held = h5::lock();
    if (!h5::write_int64s(file_, "offsets", offsets) || !h5::write_int64s(file_, "sizes", sizes) ||
        !h5::write_int64s(file_, "labels", labels) || !h5::write_strings(file_, "paths", paths) ||
        !h5::write_strings(file_, "classes", f.classes))
      fail("cannot write the index");
    if (!h5::write_string_attribute(file_, "format", kShardFormat) ||
        !h5::write_string_attribute(file_, "split", t.split->name) ||
        !h5::write_string_attribute(file_, "source", f.root) ||
        !h5::write_int_attribute(file_, "shard_index", t.shard) ||
        !h5::write_int_attribute(file_, "num_shards", t.num_shards) ||
        !h5::write_int_attribute(file_, "first_index", t.begin) ||
        !h5::write_int_attribute(file_, "total_images", static_cast<int64_t>(f.files.size())) ||
        !h5::write_int_attribute(file_, "pack_id", t.pack_id))
      fail("cannot write the attributes");
    if (!close_locked()) fail("cannot close the file");
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(path_ + ": " + what + " (HDF5: " + h5::error_text() + ")");
  }
  bool close_locked() {
    bool ok = true;
    if (images_ >= 0) ok = H5Dclose(images_) >= 0 && ok;
    if (file_ >= 0) ok = H5Fclose(file_) >= 0 && ok;
    images_ = file_ = -1;
    return ok;
  }
  std::string path_;
  hid_t file_ = -1, images_ = -1;
};

void write_shard(const Task& t, const std::atomic<bool>& stop) {
  const ImageFolder& f = t.split->folder;
  auto source_path = [&](int64_t i) { return (fs::path(f.root) / f.files[static_cast<size_t>(i)]).string(); };
  // The sizes first: the contiguous dataset is made at its final size.
  std::vector<int64_t> offsets, sizes;
  int64_t total = 0;
  for (int64_t i = t.begin; i < t.end; ++i) {
    std::error_code ec;
    const auto size = static_cast<int64_t>(fs::file_size(source_path(i), ec));
    if (ec) throw std::runtime_error(source_path(i) + ": cannot read: " + ec.message());
    offsets.push_back(total);
    sizes.push_back(size);
    total += size;
  }
  ShardFile out(t.tmp_path, total);
  std::vector<uint8_t> batch;
  int64_t batch_start = 0;
  for (int64_t i = t.begin; i < t.end && !stop; ++i) {
    const auto bytes = read_source(source_path(i), sizes[static_cast<size_t>(i - t.begin)]);
    batch.insert(batch.end(), bytes.begin(), bytes.end());
    if (static_cast<int64_t>(batch.size()) >= kWriteBatchBytes || i + 1 == t.end) {
      out.write_bytes(batch_start, batch);
      batch_start += static_cast<int64_t>(batch.size());
      batch.clear();
    }
  }
  if (stop) return;
  out.finish(t, offsets, sizes);
  sys::fsync_path(t.tmp_path);
}

// The shards of this split that out_dir holds already.
std::vector<std::string> existing_shards(const std::string& split, const std::string& out_dir) {
  std::error_code ec;
  std::vector<std::string> old_shards;
  if (fs::is_directory(out_dir, ec))
    for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
      int s = 0, n = 0;
      if (parse_shard_file_name(entry.path().filename().string(), split, s, n))
        old_shards.push_back(entry.path().string());
    }
  return old_shards;
}

// The shards of these splits that out_dir holds already. Without overwrite, any is a FolderError:
// of a complete pack (its marker there) or of an interrupted one (none: pack_marker_name).
std::vector<std::string> existing_shards(const std::vector<SplitToPack>& splits, const std::string& out_dir,
                                         bool overwrite) {
  std::vector<std::string> old_shards;
  for (const auto& split : splits) {
    const auto mine = existing_shards(split.name, out_dir);
    if (!mine.empty() && !overwrite) {
      int64_t id = 0;
      int n = 0;
      if (read_pack_marker(out_dir, split.name, id, n))
        throw FolderError(mine.front() +
                          ": shards of this split are there already (remove them, or pack with --overwrite)");
      throw FolderError(mine.front() + ": shards of an interrupted pack are there (no " +
                        (fs::path(out_dir) / pack_marker_name(split.name)).string() +
                        "): pack with --overwrite to replace them");
    }
    old_shards.insert(old_shards.end(), mine.begin(), mine.end());
  }
  return old_shards;
}

// One task per shard of every split, and what each split will become.
std::vector<Task> plan_shards(const std::vector<SplitToPack>& splits, const std::string& out_dir, int shards,
                              std::vector<PackedSplit>& packed) {
  std::vector<Task> tasks;
  std::random_device random;
  const int64_t pack_id =
      static_cast<int64_t>(((static_cast<uint64_t>(random()) << 31) ^ random()) & 0x3fffffffffffffffULL) + 1;
  for (const auto& split : splits) {
    const auto n = static_cast<int64_t>(split.folder.files.size());
    if (n < shards)
      throw FolderError(split.folder.root + ": " + std::to_string(n) + " images cannot fill " + std::to_string(shards) +
                        " shards");
    PackedSplit p;
    p.name = split.name;
    p.images = n;
    for (int s = 0; s < shards; ++s) {
      Task t{&split, s, shards, n * s / shards, n * (s + 1) / shards, "", "", pack_id};
      t.final_path = (fs::path(out_dir) / shard_file_name(split.name, s, shards)).string();
      t.tmp_path = t.final_path + ".tmp-" + std::to_string(::getpid());
      p.files.push_back(t.final_path);
      tasks.push_back(std::move(t));
    }
    packed.push_back(std::move(p));
  }
  return tasks;
}

// One thread per shard at a time: the threads' parallel work is reading the source files (a
// million small files: the slow part); their HDF5 calls take turns (h5/attributes.h says why). The first
// error stops the others and is rethrown.
void write_shards(std::vector<Task>& tasks, int threads_asked) {
  const int hardware = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::clamp(threads_asked > 0 ? threads_asked : hardware, 1, static_cast<int>(tasks.size()));
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mu;
  std::exception_ptr error;
  auto work = [&] {
    for (size_t i; !stop && (i = next++) < tasks.size();) {
      try {
        write_shard(tasks[i], stop);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

void remove_tmps(const std::vector<Task>& tasks) {
  std::error_code ec;
  for (const auto& t : tasks) fs::remove(t.tmp_path, ec);
}

// A temporary shard "<split>-SSSSS-of-NNNNN.h5.tmp-<pid>" of a pack that no longer runs (killed,
// or the machine went down): removed, saying so.
void remove_leftovers(const std::vector<SplitToPack>& splits, const std::string& out_dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const auto name = entry.path().filename().string();
    const auto at = name.rfind(".tmp-");
    if (at == std::string::npos) continue;
    int s = 0, n = 0;
    bool ours = false;
    for (const auto& split : splits)
      ours = ours || parse_shard_file_name(name.substr(0, at), split.name, s, n) ||
             name.substr(0, at) == pack_marker_name(split.name);
    const long pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
    if (!ours || pid <= 0 || (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    std::error_code removed;
    if (fs::remove(entry.path(), removed))
      std::cerr << "moco_pack: removed " << entry.path().string() << ", left by an interrupted pack (pid " << pid
                << ")\n";
  }
}

// SIGTERM, SIGINT and SIGHUP held back while the shards get their final names: a signal lands
// after the whole set is in place, never between two renames. One that came meanwhile asked to
// stop a pack that is now whole: it is taken (not delivered, which would kill the process and
// read as a failed pack) and said, and the pack finishes. After a failed commit it is delivered.
class SignalsHeld {
 public:
  SignalsHeld() {
    sigemptyset(&held_);
    for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&held_, sig);
    pthread_sigmask(SIG_BLOCK, &held_, &before_);
  }
  ~SignalsHeld() {
    if (std::uncaught_exceptions() == 0) take_the_ones_that_came();
    pthread_sigmask(SIG_SETMASK, &before_, nullptr);
  }
  void take_the_ones_that_came() {
    const timespec now{0, 0};
    for (int sig; (sig = sigtimedwait(&held_, nullptr, &now)) > 0;)
      std::cerr << "moco_pack: "
                << (sig == SIGTERM  ? "SIGTERM"
                    : sig == SIGINT ? "SIGINT"
                                    : "SIGHUP")
                << " came while the shards were renamed: the pack is whole, so it finishes\n";
  }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;

 private:
  sigset_t held_, before_;
};

// out_dir/<split>.complete, whole or absent.
void write_pack_marker(const std::string& out_dir, const std::string& split, int64_t pack_id, int shards) {
  const std::string path = (fs::path(out_dir) / pack_marker_name(split)).string();
  sys::replace_synced(path, path + ".tmp-" + std::to_string(::getpid()), pack_marker_text(pack_id, shards));
}

// Removes the splits' markers (an old pack's), then renames every temporary shard to its final name,
// removes the old shards that no new one replaced, and writes the markers last: until then (a
// kill -9 included) every reader refuses the splits. A rename that fails takes back the ones made
// before it (an old shard that a new one replaced is gone by then: --overwrite's risk), removes
// every temporary file and throws; so does a marker that cannot be written, taking back every shard.
void commit_shards(const std::vector<SplitToPack>& splits, const std::string& out_dir, const std::vector<Task>& tasks,
                   const std::vector<std::string>& old_shards) {
  const SignalsHeld held;
  // MOCO_CKPT_FAULT=pause_in_pack_commit: every shard written, the signals held; a test signals here.
  if (sys::hooks().checkpoint_fault(0).kind == sys::CheckpointFaultKind::kPauseInPackCommit)
    sys::hooks().pause_for_checkpoint_fault(out_dir);
  for (const auto& split : splits) {
    const auto marker = fs::path(out_dir) / pack_marker_name(split.name);
    std::error_code ec;
    fs::remove(marker, ec);
    if (ec) {
      remove_tmps(tasks);
      throw std::runtime_error(marker.string() + ": cannot remove the old pack's marker: " + ec.message() +
                               " (no shard of this pack is left)");
    }
  }
  try {
    sys::fsync_path(out_dir);  // no marker before the first rename
  } catch (...) {
    remove_tmps(tasks);  // no shard of this pack has its final name yet
    throw;
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    std::error_code ec;
    fs::rename(tasks[i].tmp_path, tasks[i].final_path, ec);
    if (!ec) continue;
    const std::string why = ec.message();  // before the clean-up below reuses an error code
    std::error_code ignored;
    for (size_t j = 0; j < i; ++j) fs::remove(tasks[j].final_path, ignored);
    remove_tmps(tasks);
    throw std::runtime_error(tasks[i].final_path + ": cannot rename " + tasks[i].tmp_path + " to it: " + why +
                             " (no shard of this pack is left)");
  }
  std::error_code ec;
  for (const auto& old : old_shards)
    if (std::none_of(tasks.begin(), tasks.end(), [&](const Task& t) { return t.final_path == old; }))
      fs::remove(old, ec);
  sys::fsync_path(out_dir);  // every shard in place before any marker says so
  for (const auto& split : splits) {
    try {
      write_pack_marker(out_dir, split.name, tasks.front().pack_id, tasks.front().num_shards);
    } catch (const std::exception& e) {
      std::error_code ignored;
      for (const auto& s : splits) fs::remove(fs::path(out_dir) / pack_marker_name(s.name), ignored);
      for (const auto& t : tasks) fs::remove(t.final_path, ignored);
      throw std::runtime_error(std::string(e.what()) + " (no shard of this pack is left)");
    }
  }
}

}  // namespace

std::vector<PackedSplit> pack_image_folders(const std::vector<SplitToPack>& splits, const std::string& out_dir,
                                            const PackOptions& options) {
  if (options.shards < 1 || options.shards > 99999)
    throw FolderError("the number of shards must lie in [1, 99999], not " + std::to_string(options.shards));
  const auto old_shards = existing_shards(splits, out_dir, options.overwrite);
  std::vector<PackedSplit> packed;
  auto tasks = plan_shards(splits, out_dir, options.shards, packed);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw std::runtime_error(out_dir + ": cannot create the folder: " + ec.message());
  remove_leftovers(splits, out_dir);
  try {
    write_shards(tasks, options.threads);
  } catch (...) {
    remove_tmps(tasks);
    throw;
  }
  // Every shard is complete and synced: only now do final names appear, all of them or none.
  commit_shards(splits, out_dir, tasks, old_shards);
  sys::fsync_path(out_dir);
  for (auto& p : packed)
    for (const auto& file : p.files) p.bytes += static_cast<int64_t>(fs::file_size(file, ec));
  return packed;
}

}  // namespace moco::data
