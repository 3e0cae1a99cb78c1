#include "dist/nccl_transport_log.h"

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <set>
#include <sstream>

namespace moco::dist {
namespace {

const char* env_value(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : it->second.c_str();
}

// NCCL_DEBUG_FILE as NCCL opens it: %h the host, %p the pid, %% a percent sign.
std::string expand_debug_file(const std::string& pattern, const std::string& host, int pid) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 == pattern.size()) {
      out += pattern[i];
      continue;
    }
    const char c = pattern[++i];
    if (c == 'h') {
      out += host;
    } else if (c == 'p') {
      out += std::to_string(pid);
    } else if (c == '%') {
      out += '%';
    } else {
      out += '%';
      out += c;
    }
  }
  return out;
}

struct Transport {
  std::string name;  // "P2P/CUMEM/read"
  std::set<int> peers;
  int connections = 0;
};

std::string peers_text(const std::set<int>& peers) {
  std::string text = peers.size() == 1 ? "rank " : "ranks ";
  bool first = true;
  for (int p : peers) {
    text += (first ? "" : ", ") + std::to_string(p);
    first = false;
  }
  return text;
}

}  // namespace

NcclDebugLog plan_nccl_debug_log(const EnvMap& env, const std::string& file, const std::string& host, int pid) {
  NcclDebugLog plan;
  const char* level = env_value(env, "NCCL_DEBUG");
  const char* user_file = env_value(env, "NCCL_DEBUG_FILE");
  if (level == nullptr) {
    if (user_file == nullptr && file.empty()) {
      plan.why_none = "no run folder to put NCCL's log in";
      return plan;
    }
    plan.set.emplace_back("NCCL_DEBUG", "INFO");
    if (env_value(env, "NCCL_DEBUG_SUBSYS") == nullptr) plan.set.emplace_back("NCCL_DEBUG_SUBSYS", "INIT,P2P,NET");
    if (user_file == nullptr) plan.set.emplace_back("NCCL_DEBUG_FILE", file);
    plan.file = user_file != nullptr ? expand_debug_file(user_file, host, pid) : file;
    return plan;
  }
  const std::string given(level);
  const bool informs = given == "INFO" || given == "TRACE";
  if (informs && user_file != nullptr) {
    plan.file = expand_debug_file(user_file, host, pid);
  } else if (informs) {
    plan.why_none = "NCCL_DEBUG=" + given + " without NCCL_DEBUG_FILE: NCCL prints its connection lines on stdout";
  } else {
    plan.why_none = "NCCL_DEBUG=" + given + " logs no connections (unset NCCL_DEBUG to have them here)";
  }
  return plan;
}

EnvMap nccl_debug_env() {
  EnvMap env;
  for (const char* name : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})
    if (const char* value = std::getenv(name)) env[name] = value;
  return env;
}

std::string summarize_nccl_transports(const std::string& log_text, int rank) {
  // p2p.cc, shm.cc and net.cc log each connection they make, e.g. "Channel 02/0 : 1[1] -> 0[0]
  // [receive] via NET/IB/0/GDRDMA"; the init logs the network it loaded ("Using network IB").
  static const std::regex connection(
      R"(Channel [0-9]+/[0-9]+ : ([0-9]+)\[[0-9]+\] -> ([0-9]+)\[[0-9]+\](?: \[(?:send|receive)\])? via (\S+))");
  static const std::regex network(R"(Using network (\S+))");
  std::vector<Transport> transports;
  std::string network_name;
  std::istringstream lines(log_text);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (network_name.empty() && std::regex_search(line, m, network)) network_name = m[1].str();
    if (!std::regex_search(line, m, connection)) continue;
    const int from = std::stoi(m[1].str()), to = std::stoi(m[2].str());
    auto it = std::find_if(transports.begin(), transports.end(), [&](const Transport& t) { return t.name == m[3]; });
    if (it == transports.end()) it = transports.insert(transports.end(), Transport{m[3].str(), {}, 0});
    it->peers.insert(from == rank ? to : from);
    ++it->connections;
  }
  std::string summary;
  for (const auto& t : transports) {
    summary += (summary.empty() ? "" : "; ") + t.name + " with " + peers_text(t.peers) + " (" +
               std::to_string(t.connections) + (t.connections == 1 ? " connection)" : " connections)");
  }
  if (!summary.empty() && !network_name.empty()) summary += "; network " + network_name;
  return summary;
}

}  // namespace moco::dist
