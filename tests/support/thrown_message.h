// The message a test expects some code to throw.
#pragma once

#include <exception>
#include <string>

namespace moco::test {

// The std::exception's message, or "" when fn throws nothing: a check on the text then fails and
// shows what was expected.
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace moco::test
