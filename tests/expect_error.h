// Error checks by behaviour, not wording: expect fn() to throw a vtpu::Error of a given code whose
// message names the offending values. A rewording of the sentence around them breaks nothing.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>

#include "vtpu/common/error.h"

namespace vtpu::testing {

/// Expects fn() to throw a vtpu::Error with `code` whose message contains every one of `values`
/// (the offending values, as they are printed). Returns the message ("" if nothing or something
/// else was thrown), so that a caller can check more.
template <typename Fn>
std::string expect_error(ErrorCode code, Fn&& fn, std::initializer_list<std::string_view> values) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(error_code_name(e.code()), error_code_name(code)) << e.what();
    for (std::string_view v : values) {
      EXPECT_NE(e.message().find(v), std::string::npos) << "'" << v << "' not in: " << e.what();
    }
    return e.message();
  }
  ADD_FAILURE() << "expected " << error_code_name(code) << " naming " << values.size()
                << " value(s)";
  return "";
}

}  // namespace vtpu::testing
