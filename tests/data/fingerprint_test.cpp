// The data's fingerprint (data/fingerprint.h): what a checkpoint keeps of its train split and what
// ranks compare. The hash does not depend on the blocks; the text reads back as it was written and a
// malformed one is refused; a change is described by its counts and its first differing entry, on
// both sides, exactly where the fingerprint keeps every entry and by block where it keeps blocks.
#include "data/fingerprint.h"
#include "thrown_message.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace {

using namespace moco::data;
using moco::test::error_of;

// A listing over entries held by the test: class folders a/ and b/, sizes from the index.
SplitListing listing_of(const std::vector<ListedEntry>& entries) {
  auto held = std::make_shared<std::vector<ListedEntry>>(entries);
  return {"imagefolder", "data/train", static_cast<int64_t>(held->size()), static_cast<int64_t>(held->size()),
          [held](int64_t i) { return (*held)[static_cast<size_t>(i)]; }};
}

std::vector<ListedEntry> images(int n) {
  std::vector<ListedEntry> e;
  for (int i = 0; i < n; ++i)
    e.push_back({(i < n / 2 ? "a/" : "b/") + std::to_string(100 + i) + ".jpg", 1000 + i, i < n / 2 ? 0 : 1});
  return e;
}

TEST(DataFingerprint, TheHashIsTheEntriesWhateverTheBlocks) {
  const auto listing = listing_of(images(10));
  const auto one = fingerprint(listing), three = fingerprint(listing, 3);
  EXPECT_EQ(one.block, 1);
  EXPECT_EQ(one.blocks.size(), 10u);
  EXPECT_EQ(three.block, 4);
  EXPECT_EQ(three.blocks.size(), 3u);
  EXPECT_EQ(three.blocks[1].first, listing.entry(4));
  EXPECT_EQ(one.hash, three.hash);
  EXPECT_EQ(prefix_hashes(listing).back(), one.hash);
  EXPECT_EQ(prefix_hashes(listing).size(), 11u);
  // Each part of an entry counts: its path, its size, its label, its content.
  for (int part = 0; part < 4; ++part) {
    auto e = images(10);
    if (part == 0) e[3].path = "a/other.jpg";
    if (part == 1) e[3].size += 1;
    if (part == 2) e[3].label = 1;
    if (part == 3) e[3].content = 9;
    SCOPED_TRACE(part);
    EXPECT_NE(fingerprint(listing_of(e)).hash, one.hash);
    // The prefixes agree up to the changed entry, and differ from it on.
    const auto changed = prefix_hashes(listing_of(e)), same = prefix_hashes(listing);
    EXPECT_EQ(changed[3], same[3]);
    EXPECT_NE(changed[4], same[4]);
  }
}

TEST(DataFingerprint, TheTextReadsBackAndAMalformedOneIsRefused) {
  auto e = images(5);
  e[0].content = 0xfedcba9876543210ULL;
  const auto f = fingerprint(listing_of(e), 2);
  const auto back = fingerprint_from_json(to_json(f), "m.json");
  EXPECT_EQ(back.kind, "imagefolder");
  EXPECT_EQ(back.images, 5);
  EXPECT_EQ(back.entries, 5);
  EXPECT_EQ(back.hash, f.hash);
  EXPECT_EQ(back.block, 3);
  ASSERT_EQ(back.blocks.size(), 2u);
  EXPECT_EQ(back.blocks[0].first, e[0]);
  EXPECT_EQ(back.blocks[1].hash, f.blocks[1].hash);
  const auto refusal = [&](const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(to_json(f));
    edit(j);
    return error_of([&] { fingerprint_from_json(j.dump(), "m.json"); });
  };
  EXPECT_NE(refusal([](auto& j) { j["format"] = "x"; }).find("m.json: not a moco_dist data fingerprint"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["images"] = 2.5; }).find("m.json: images is not an integer"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["hash"] = "12"; }).find("hash '12' is not 16 hex digits"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["blocks"].erase(1); }).find("5 entries in blocks of 3 holds 1 blocks"),
            std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j["block"] = 0; }).find("in blocks of 0"), std::string::npos);
  EXPECT_NE(refusal([](auto& j) { j.erase("kind"); }).find("m.json: a malformed data fingerprint"), std::string::npos);
}

TEST(DataFingerprint, AChangeIsNamedByItsCountsAndFirstDifferingEntry) {
  const auto then = fingerprint(listing_of(images(8)));
  EXPECT_EQ(describe_change(then, listing_of(images(8))), "");
  // Deleted: the last three of class a.
  auto fewer = images(8);
  fewer.erase(fewer.begin() + 1, fewer.begin() + 4);
  EXPECT_EQ(describe_change(then, listing_of(fewer)),
            "data/train: 8 images then, 5 now; first difference at entry #1: 'a/101.jpg' (1001 bytes, label 0) then, "
            "'b/104.jpg' (1004 bytes, label 1) now");
  // Appended: the entry past the end is "none" then.
  auto more = images(8);
  more.push_back({"b/999.jpg", 5, 1});
  EXPECT_EQ(describe_change(then, listing_of(more)),
            "data/train: 8 images then, 9 now; first difference at entry #8: none then, 'b/999.jpg' (5 bytes, label 1) "
            "now");
  // The same count: a label swapped.
  auto relabelled = images(8);
  relabelled[6].label = 0;
  EXPECT_EQ(describe_change(then, listing_of(relabelled)),
            "data/train: 8 images then and now; first difference at entry #6: 'b/106.jpg' (1006 bytes, label 1) then, "
            "'b/106.jpg' (1006 bytes, label 0) now");
  // Kept by blocks (a large split): the first block that differs, by its first entries.
  const auto blocks = fingerprint(listing_of(images(8)), 2);
  EXPECT_EQ(describe_change(blocks, listing_of(relabelled)),
            "data/train: 8 images then and now; first difference among entries #4-#7 (the fingerprint keeps blocks of "
            "4): they began with 'b/104.jpg' (1004 bytes, label 1) then, with 'b/104.jpg' (1004 bytes, label 1) now");
  // Another kind of data altogether.
  auto idx = listing_of(images(8));
  idx.kind = "idx";
  EXPECT_EQ(describe_change(then, idx), "the data was imagefolder then, idx now (data/train)");
}

}  // namespace
