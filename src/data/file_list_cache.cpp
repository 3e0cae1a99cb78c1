#include "data/file_list_cache.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace moco::data {
namespace fs = std::filesystem;
namespace {

constexpr const char* kHeader = "moco_dist file list 2";  // 1: no sizes (ignored, rescanned)
constexpr int64_t kFreshNs = 2'000'000'000;

// Modification time in ns since the epoch, following links (as the scan does); -1 if unknown.
int64_t mtime_ns(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string absolute_root(const std::string& root) {
  std::error_code ec;
  const fs::path p = fs::absolute(root, ec);
  return (ec ? fs::path(root) : p).lexically_normal().string();
}

// Where the cache of `root` may live, in order of preference.
std::vector<fs::path> cache_paths(const std::string& root, const std::vector<std::string>& extra_dirs) {
  fs::path r = fs::path(absolute_root(root));
  if (!r.has_filename()) r = r.parent_path();  // a trailing slash
  const std::string name = ".moco_filelist-" + r.filename().string() + ".txt";
  std::vector<fs::path> paths{r.parent_path() / name};
  for (const auto& d : extra_dirs)
    if (!d.empty()) paths.push_back(fs::path(d) / name);
  return paths;
}

// The cached list, if the file is complete, names `root` and no folder has changed since.
bool load(const fs::path& path, const std::string& root, ImageFolder& folder) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line, word;
  if (!std::getline(in, line) || line != kHeader) return false;
  if (!std::getline(in, line) || line != "root " + absolute_root(root)) return false;
  auto count = [&](const char* what, int64_t& n) {
    if (!std::getline(in, line)) return false;
    std::istringstream s(line);
    return (s >> word >> n) && word == what && n >= 0 && s.eof();
  };
  // "<number> <rest of the line>", of `line`
  auto split_number = [&](int64_t& number, std::string& rest) {
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0) return false;
    try {
      size_t used = 0;
      number = std::stoll(line.substr(0, space), &used);
      if (used != space) return false;
    } catch (const std::exception&) {
      return false;
    }
    rest = line.substr(space + 1);
    return true;
  };
  // The same, of the next line.
  auto numbered = [&](int64_t& number, std::string& rest) {
    return std::getline(in, line) && split_number(number, rest);
  };
  int64_t n = 0;
  if (!count("folders", n)) return false;
  for (int64_t i = 0; i < n; ++i) {
    int64_t recorded = 0;
    std::string dir;
    if (!numbered(recorded, dir) || mtime_ns(fs::path(root) / dir) != recorded) return false;
  }
  ImageFolder f;
  f.root = root;
  if (!count("classes", n)) return false;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::getline(in, line)) return false;
    f.classes.push_back(line);
  }
  if (!count("files", n)) return false;
  f.files.reserve(static_cast<size_t>(n));
  f.labels.reserve(static_cast<size_t>(n));
  f.sizes.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = 0, size = 0;
    std::string rest, file;
    if (!numbered(label, rest) || label < 0 || label >= static_cast<int64_t>(f.classes.size())) return false;
    line = rest;  // "<size> <path>"; -1: a file gone between its listing and its stat
    if (!split_number(size, file) || size < -1) return false;
    f.files.push_back(std::move(file));
    f.labels.push_back(label);
    f.sizes.push_back(size);
  }
  if (!std::getline(in, line) || line != "end" || f.classes.empty() || f.files.empty()) return false;
  folder = std::move(f);
  return true;
}

bool has_line_break(const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (n.find('\n') != std::string::npos || n.find('\r') != std::string::npos) return true;
  return false;
}

// Written under a temporary name and renamed: ranks scanning at once each write a whole file.
bool store(const fs::path& path, const std::string& root, const ImageFolder& f,
           const std::vector<std::pair<std::string, int64_t>>& folders) {
  std::error_code ec;
  if (!fs::is_directory(path.parent_path(), ec)) return false;
  const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return false;
    out << kHeader << "\nroot " << absolute_root(root) << "\nfolders " << folders.size() << "\n";
    for (const auto& [dir, time] : folders) out << time << ' ' << dir << '\n';
    out << "classes " << f.classes.size() << "\n";
    for (const auto& c : f.classes) out << c << '\n';
    out << "files " << f.files.size() << "\n";
    for (size_t i = 0; i < f.files.size(); ++i) out << f.labels[i] << ' ' << f.sizes[i] << ' ' << f.files[i] << '\n';
    out << "end\n";
    if (!out.flush()) {
      out.close();
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec);
  if (!ec) return true;
  fs::remove(tmp, ec);  // clears ec: the rename's failure is the answer
  return false;
}

}  // namespace

namespace {

double seconds_since_ns(int64_t start) { return static_cast<double>(now_ns() - start) * 1e-9; }

// The scan and where its list went: at 1.28M files the start's largest cost, so said with its time.
void log_scan(const std::string& root, const CachedScan& scan, double seconds, const char* not_kept) {
  spdlog::info("{}: scanned {} images in {} classes in {:.1f}s; {}", root, scan.folder.files.size(),
               scan.folder.classes.size(), seconds,
               scan.written_to.empty() ? std::string(not_kept) : "file list kept in " + scan.written_to);
}

}  // namespace

CachedScan scan_image_folder_cached(const std::string& root, const std::vector<std::string>& extra_dirs, bool write,
                                    bool write_extra_dirs) {
  CachedScan result;
  const int64_t started = now_ns();
  const auto paths = cache_paths(root, extra_dirs);
  for (const auto& p : paths)
    if (load(p, root, result.folder)) {
      result.read_from = p.string();
      spdlog::info("{}: file list of {} images from {} ({:.1f}s)", root, result.folder.files.size(), result.read_from,
                   seconds_since_ns(started));
      return result;
    }
  std::vector<std::string> walked;
  result.folder = scan_image_folder(root, &walked);
  const double seconds = seconds_since_ns(started);
  std::vector<std::pair<std::string, int64_t>> folders;
  for (const auto& dir : walked) {
    const int64_t t = mtime_ns(fs::path(root) / dir);
    if (t < 0 || t >= started - kFreshNs) {  // changed just now: a list that may miss it is not kept
      log_scan(root, result, seconds, "no file list kept: a folder changed during the scan or just before it");
      return result;
    }
    folders.emplace_back(dir, t);
  }
  if (!write || has_line_break(walked) || has_line_break(result.folder.classes) ||
      has_line_break(result.folder.files)) {
    log_scan(root, result, seconds,
             write ? "no file list kept: a name holds a line break" : "rank 0 keeps the file list");
    return result;
  }
  const size_t writable = write_extra_dirs ? paths.size() : 1;  // paths[0]: beside the split
  for (size_t i = 0; i < writable; ++i)
    if (const auto& p = paths[i]; store(p, root, result.folder, folders)) {
      result.written_to = p.string();
      break;
    }
  log_scan(root, result, seconds,
           writable < paths.size() ? "no file list kept: the data's folder cannot be written, and this run writes none "
                                     "into train.output_dir"
                                   : "no file list kept: no folder for it could be written");
  return result;
}

}  // namespace moco::data
