#include "data/fingerprint.h"

#include "data/hash.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace moco::data {
namespace {

constexpr uint64_t kSeed = 0x6D6F636F64617461ULL;  // "mocodata"
constexpr const char* kFormat = "moco_dist data fingerprint 1";

// The string's bytes, 8 at a time, and its length: stable across builds and machines (std::hash is not).
uint64_t text_hash(const std::string& s) {
  uint64_t h = detail::hash_combine(kSeed, s.size());
  for (size_t i = 0; i < s.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, std::min<size_t>(8, s.size() - i));
    h = detail::hash_combine(h, word);
  }
  return h;
}

std::string hex(uint64_t v) { return fmt::format("{:016x}", v); }

uint64_t from_hex(const nlohmann::json& value, const std::string& what, const std::string& where) {
  const auto text = value.get<std::string>();
  size_t used = 0;
  uint64_t v = 0;
  try {
    v = std::stoull(text, &used, 16);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.size() != 16 || used != 16)
    throw std::runtime_error(where + ": " + what + " '" + text + "' is not 16 hex digits");
  return v;
}

// A JSON integer, never a float or a string cast to one.
int64_t integer(const nlohmann::json& value, const char* what, const std::string& where) {
  if (!value.is_number_integer()) throw std::runtime_error(where + ": " + what + " is not an integer: " + value.dump());
  return value.get<int64_t>();
}

nlohmann::json entry_json(const ListedEntry& e) { return {e.path, e.size, e.label, hex(e.content)}; }

ListedEntry entry_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_array() || j.size() != 4)
    throw std::runtime_error(where + ": an entry is not [path, size, label, content]");
  return {j.at(0).get<std::string>(), integer(j.at(1), "an entry's size", where),
          integer(j.at(2), "an entry's label", where), from_hex(j.at(3), "an entry's content", where)};
}

// The listing's entry `index` for a message, "none" past its end.
std::string entry_text(const SplitListing& listing, int64_t index) {
  return index < listing.entries ? describe(listing.entry(index)) : "none";
}

DataFingerprint fingerprint_in_blocks(const SplitListing& listing, int64_t block) {
  DataFingerprint f;
  f.kind = listing.kind;
  f.images = listing.images;
  f.entries = listing.entries;
  f.block = block;
  f.hash = kSeed;
  for (int64_t i = 0; i < listing.entries; ++i) {
    const ListedEntry e = listing.entry(i);
    const uint64_t h = entry_hash(e);
    f.hash = detail::hash_combine(f.hash, h);
    if (i % block == 0) f.blocks.push_back({e, kSeed});
    f.blocks.back().hash = detail::hash_combine(f.blocks.back().hash, h);
  }
  return f;
}

}  // namespace

std::string describe(const ListedEntry& e) {
  if (e.label >= 0) return fmt::format("'{}' ({} bytes, label {})", e.path, e.size, e.label);
  if (e.content != 0) return fmt::format("'{}' ({} bytes, content {})", e.path, e.size, hex(e.content));
  return fmt::format("'{}'", e.path);
}

uint64_t entry_hash(const ListedEntry& e) {
  uint64_t h = detail::hash_combine(text_hash(e.path), static_cast<uint64_t>(e.size));
  h = detail::hash_combine(h, static_cast<uint64_t>(e.label));
  return detail::hash_combine(h, e.content);
}

std::vector<uint64_t> prefix_hashes(const SplitListing& listing) {
  std::vector<uint64_t> h(static_cast<size_t>(listing.entries) + 1, kSeed);
  for (int64_t i = 0; i < listing.entries; ++i)
    h[static_cast<size_t>(i) + 1] = detail::hash_combine(h[static_cast<size_t>(i)], entry_hash(listing.entry(i)));
  return h;
}

DataFingerprint fingerprint(const SplitListing& listing, int64_t max_blocks) {
  max_blocks = std::max<int64_t>(1, max_blocks);
  return fingerprint_in_blocks(listing, std::max<int64_t>(1, (listing.entries + max_blocks - 1) / max_blocks));
}

std::string to_json(const DataFingerprint& f) {
  nlohmann::json blocks = nlohmann::json::array();
  for (const auto& b : f.blocks) blocks.push_back({hex(b.hash), entry_json(b.first)});
  const nlohmann::json j{{"format", kFormat},   {"kind", f.kind},   {"images", f.images}, {"entries", f.entries},
                         {"hash", hex(f.hash)}, {"block", f.block}, {"blocks", blocks}};
  return j.dump();
}

DataFingerprint fingerprint_from_json(const std::string& text, const std::string& where) {
  DataFingerprint f;
  try {
    const auto j = nlohmann::json::parse(text);
    if (j.value("format", "") != kFormat) throw std::runtime_error(where + ": not a " + std::string(kFormat));
    f.kind = j.at("kind").get<std::string>();
    f.images = integer(j.at("images"), "images", where);
    f.entries = integer(j.at("entries"), "entries", where);
    f.hash = from_hex(j.at("hash"), "hash", where);
    f.block = integer(j.at("block"), "block", where);
    for (const auto& b : j.at("blocks"))
      f.blocks.push_back({entry_from_json(b.at(1), where), from_hex(b.at(0), "a block's hash", where)});
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where + ": a malformed data fingerprint: " + e.what());
  }
  const int64_t expected = f.block < 1 ? -1 : (f.entries + f.block - 1) / f.block;
  if (f.images < 0 || f.entries < 0 || static_cast<int64_t>(f.blocks.size()) != expected)
    throw std::runtime_error(fmt::format("{}: a data fingerprint of {} entries in blocks of {} holds {} blocks", where,
                                         f.entries, f.block, f.blocks.size()));
  return f;
}

std::string describe_change(const DataFingerprint& then, const SplitListing& now) {
  if (then.kind != now.kind) return fmt::format("the data was {} then, {} now ({})", then.kind, now.kind, now.where);
  const DataFingerprint current = fingerprint_in_blocks(now, then.block);
  if (current.hash == then.hash && current.images == then.images && current.entries == then.entries) return "";
  const std::string change = then.images == now.images
                                 ? fmt::format("{}: {} images then and now", now.where, now.images)
                                 : fmt::format("{}: {} images then, {} now", now.where, then.images, now.images);
  for (size_t k = 0; k < std::max(then.blocks.size(), current.blocks.size()); ++k) {
    const bool in_then = k < then.blocks.size(), in_now = k < current.blocks.size();
    if (in_then && in_now && then.blocks[k].hash == current.blocks[k].hash) continue;
    const int64_t first = static_cast<int64_t>(k) * then.block;
    const std::string was = in_then ? describe(then.blocks[k].first) : "none";
    if (then.block == 1)
      return fmt::format("{}; first difference at entry #{}: {} then, {} now", change, first, was,
                         entry_text(now, first));
    return fmt::format(
        "{}; first difference among entries #{}-#{} (the fingerprint keeps blocks of {}): they began with {} then, "
        "with {} now",
        change, first, first + then.block - 1, then.block, was, entry_text(now, first));
  }
  return change + "; the same entries";  // the count of images alone (IDX: the files hash the same)
}

}  // namespace moco::data
