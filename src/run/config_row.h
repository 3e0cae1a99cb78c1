// defines: ConfigRow (one config key a method's room declares: its dotted name, help, the member it
// binds, its range rule, whether a resume must match it, where --help lists it), the range rules the
// rows share (rules::positive, at_least_one, in_closed), require (a ConfigError naming file and key)
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>

namespace moco::run {

struct Config;

// What is wrong with a value ("must be positive"), or "" when it is allowed.
template <typename T>
using Rule = std::function<std::string(const T&)>;

// A key's binding to a member of the config (in a method's settings), typed, with its range.
template <typename T>
struct Binding {
  std::function<T&(Config&)> member;
  Rule<T> rule;  // may be empty
};

struct ConfigRow {
  std::string key, help;
  std::variant<Binding<bool>, Binding<int64_t>, Binding<double>> binding;
  bool resume_must_match = true;  // it changes what a run computes: a checkpoint resumes only if it is unchanged
  std::string listed_after;       // the shared key that --help and to_yaml list it after

  // ConfigRow::of<int64_t>("<section>.<key>", help, member): a row of that type, no range yet.
  template <typename T>
  static ConfigRow of(std::string key, std::string help, std::function<T&(Config&)> member) {
    ConfigRow row;
    row.key = std::move(key);
    row.help = std::move(help);
    row.binding = Binding<T>{std::move(member), {}};
    return row;
  }
  template <typename T>
  ConfigRow must(Rule<T> rule) && {
    std::get<Binding<T>>(binding).rule = std::move(rule);
    return std::move(*this);
  }
  ConfigRow after(std::string shared_key) && {
    listed_after = std::move(shared_key);
    return std::move(*this);
  }
  ConfigRow free_on_resume() && {
    resume_must_match = false;
    return std::move(*this);
  }
};

// The range rules the rooms' rows share; each message is the one a key's error gives.
namespace rules {
template <typename T>
std::string positive(const T& v) {
  return v > 0 ? "" : "must be positive";
}
template <typename T>
std::string non_negative(const T& v) {
  return v >= 0 ? "" : "must be >= 0";
}
template <typename T>
std::string at_least_one(const T& v) {
  return v >= 1 ? "" : "must be at least 1";
}
Rule<double> in_closed(double lo, double hi);  // [lo, hi]
}  // namespace rules

// Throws ConfigError "<where>: key '<key>' <what>" unless `ok`.
void require(bool ok, const std::string& where, const std::string& key, const std::string& what);

}  // namespace moco::run
