// defines: lies_within, whether one path is a folder or lies inside it (the tools' "never write
// inside what you read" check)
#pragma once

#include <filesystem>
#include <string>

namespace moco::sys {

// True when `path` is `folder` or lies under it, symbolic links and `..` resolved (neither need
// exist). A path that cannot be resolved compares as given.
inline bool lies_within(const std::string& path, const std::string& folder) {
  std::error_code ec;
  auto resolved = [&](const std::string& p) {
    auto r = std::filesystem::weakly_canonical(std::filesystem::absolute(p, ec), ec);
    return ec ? std::filesystem::path(p).lexically_normal() : r;
  };
  const auto inner = resolved(path).string(), outer = resolved(folder).string();
  return inner == outer || inner.rfind(outer + (outer.back() == '/' ? "" : "/"), 0) == 0;
}

}  // namespace moco::sys
