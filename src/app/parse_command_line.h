// defines: parse_command_line, CLI11's parse with the exit codes every main here documents
#pragma once

#include <CLI/CLI.hpp>

#include <optional>

namespace moco::app {

// --help prints and gives 0; a bad command line prints CLI11's message and gives 2 (CLI11's own
// codes are 100 and up); nullopt: parsed, carry on.
inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return std::nullopt;
}

}  // namespace moco::app
