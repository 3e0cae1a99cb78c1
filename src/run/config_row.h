// defines: ConfigRow (one config key: its dotted name, help, the member it binds, its range rule,
// whether a resume must match it, where --help lists it; the one way every key is declared, the
// shared ones in config_keys.cpp and each method's in its room), RowOf (the typed builder of a row),
// the range rules rows share (rules::positive, non_negative, at_least_one, in_closed), require (a
// ConfigError naming file and key)
#pragma once

#include "data/augment_options.h"
#include "run/config_choices.h"

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

namespace moco::run {

struct Config;

// What is wrong with a value ("must be positive"), or "" when it is allowed.
template <typename T>
using Rule = std::function<std::string(const T&)>;

// A key's binding to a member of the config, typed, with its range.
template <typename T>
struct Binding {
  std::function<T&(Config&)> member;
  Rule<T> rule;  // may be empty
};

template <typename T>
struct RowOf;

struct ConfigRow {
  std::string key, help;
  std::variant<Binding<bool>, Binding<int>, Binding<int64_t>, Binding<uint64_t>, Binding<double>, Binding<std::string>,
               Binding<std::vector<double>>, Binding<Arch>, Binding<Optimizer>, Binding<Precision>, Binding<Dataset>,
               Binding<Schedule>, Binding<LrUpdate>, Binding<data::Recipe>, Binding<data::Transforms>>
      binding;
  bool resume_must_match = true;  // of a method's key: a checkpoint resumes only if it is unchanged
  std::string listed_after;       // of a method's key: the shared key that --help and to_yaml list it after

  // ConfigRow::of<int64_t>("<section>.<key>", help, member): a row of that type; RowOf adds its range.
  template <typename T>
  static RowOf<T> of(std::string key, std::string help, std::function<T&(Config&)> member);
};

// A row being written: its rule is a Rule of the member's own type, so a generic rule fits.
template <typename T>
struct RowOf {
  ConfigRow row;

  RowOf must(Rule<T> rule) && {
    std::get<Binding<T>>(row.binding).rule = std::move(rule);
    return std::move(*this);
  }
  RowOf after(std::string shared_key) && {
    row.listed_after = std::move(shared_key);
    return std::move(*this);
  }
  RowOf free_on_resume() && {
    row.resume_must_match = false;
    return std::move(*this);
  }
  operator ConfigRow() && { return std::move(row); }  // NOLINT(google-explicit-constructor): rows are lists
};

template <typename T>
RowOf<T> ConfigRow::of(std::string key, std::string help, std::function<T&(Config&)> member) {
  RowOf<T> typed;
  typed.row.key = std::move(key);
  typed.row.help = std::move(help);
  typed.row.binding = Binding<T>{std::move(member), {}};
  return typed;
}

// The range rules rows share; each message is the one a key's error gives.
namespace rules {
inline const auto positive = [](const auto& v) -> std::string { return v > 0 ? "" : "must be positive"; };
inline const auto non_negative = [](const auto& v) -> std::string { return v >= 0 ? "" : "must be >= 0"; };
inline const auto at_least_one = [](const auto& v) -> std::string { return v >= 1 ? "" : "must be at least 1"; };
Rule<double> in_closed(double lo, double hi);  // [lo, hi]
// [lo, hi]: a size key's bound, far above any recipe's value, so that a typo is named before anything
// is allocated (a head's width of 10^12 ended in a LibTorch stack trace).
Rule<int64_t> in_range(int64_t lo, int64_t hi);
}  // namespace rules

// Throws ConfigError "<where>: key '<key>' <what>" unless `ok`.
void require(bool ok, const std::string& where, const std::string& key, const std::string& what);

}  // namespace moco::run
