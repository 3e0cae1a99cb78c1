// defines: ListedEntry (one file of a split as the data layer lists it), SplitListing (a split's
// entries by index), DataFingerprint (what a checkpoint keeps of the data it trained on: a hash of the
// listing and, per block of entries, a hash and the block's first entry), its JSON text,
// describe_change (what differs between a fingerprint and a listing) and prefix_hashes (for ranks
// that look for their first differing entry)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace moco::data {

// A file of a split: an image of an ImageFolder or of packed shards (its path relative to the split's
// folder, its size as the scan or the pack recorded it, its class), or a whole data file (IDX: its
// name, size and a hash of its bytes, label -1).
struct ListedEntry {
  std::string path;
  int64_t size = 0;
  int64_t label = -1;
  uint64_t content = 0;  // a hash of the bytes where they were read (IDX files); 0 where they were not
  bool operator==(const ListedEntry& o) const {
    return path == o.path && size == o.size && label == o.label && content == o.content;
  }
};

// "'cat/001.jpg' (1234 bytes, label 0)", for messages.
std::string describe(const ListedEntry& entry);
uint64_t entry_hash(const ListedEntry& entry);

// What the data layer already knows of a split: an ImageFolder's file list (or its cache), packed
// shards' index, the IDX files, the synthetic set's parameters. Nothing is read to make it but the
// IDX files (hashed).
struct SplitListing {
  std::string kind;     // "imagefolder", "hdf5", "idx", "synthetic"
  std::string where;    // the split's folder, shards or files, for messages
  int64_t images = 0;   // samples of the split
  int64_t entries = 0;  // listed entries (the images, or the IDX files)
  std::function<ListedEntry(int64_t)> entry;
};

struct FingerprintBlock {
  ListedEntry first;  // the block's first entry
  uint64_t hash = 0;  // over the block's entries
};

struct DataFingerprint {
  std::string kind;
  int64_t images = 0, entries = 0;
  uint64_t hash = 0;  // over every entry, in order (the same whatever the block size)
  int64_t block = 1;  // entries per block: a split of up to max_blocks entries is kept entry by entry
  std::vector<FingerprintBlock> blocks;
};

// The listing's fingerprint, its entries in blocks of the fewest entries that make at most
// max_blocks blocks (1024: some 80 KiB of text for ImageNet's 1.28M images, exact for small splits).
DataFingerprint fingerprint(const SplitListing& listing, int64_t max_blocks = 1024);

// As text (JSON), and back; a malformed text throws std::runtime_error naming `where`.
std::string to_json(const DataFingerprint& fingerprint);
DataFingerprint fingerprint_from_json(const std::string& text, const std::string& where);

// "" when `now` lists what `then` fingerprinted; otherwise what changed: the count of images, then
// the first entry that differs, by both names ("48 images then, 30 now; first difference at entry
// #3: 'a/003.png' (170 bytes, label 0) then, 'a/021.png' (170 bytes, label 0) now"). Where `then`
// kept blocks of several entries, the first block that differs is named by its first entries.
std::string describe_change(const DataFingerprint& then, const SplitListing& now);

// h[0] = a fixed seed, h[i + 1] = the hash over entries [0, i]: two listings agree on their first i
// entries exactly when (but for a 2^-64 chance) their h[i] agree, so the first differing entry can
// be found by bisection with a few words exchanged. h.back() is fingerprint(listing).hash.
std::vector<uint64_t> prefix_hashes(const SplitListing& listing);

}  // namespace moco::data
