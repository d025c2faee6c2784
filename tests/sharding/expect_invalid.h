// Shared by the sharding tests: expect fn() to throw InvalidArgumentError whose message contains
// every one of `parts`.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>

#include "vtpu/common/error.h"

namespace vtpu::testing {

template <typename Fn>
void expect_invalid(Fn fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    for (const char* p : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(p));
  }
}

}  // namespace vtpu::testing
