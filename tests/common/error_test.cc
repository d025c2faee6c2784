// Tests for common/error.h: canonical codes, names and the "<CodeName>: <message>" format.
#include "vtpu/common/error.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <stdexcept>
#include <string>

namespace vtpu {
namespace {

TEST(ErrorTest, CodeNamesMatchAbsl) {
  EXPECT_EQ(error_code_name(ErrorCode::kInvalidArgument), "InvalidArgument");
  EXPECT_EQ(error_code_name(ErrorCode::kResourceExhausted), "ResourceExhausted");
  EXPECT_EQ(error_code_name(ErrorCode::kDeadlineExceeded), "DeadlineExceeded");
  EXPECT_EQ(error_code_name(ErrorCode::kAborted), "Aborted");
  EXPECT_EQ(error_code_name(ErrorCode::kFailedPrecondition), "FailedPrecondition");
  EXPECT_EQ(error_code_name(ErrorCode::kUnimplemented), "Unimplemented");
  EXPECT_EQ(error_code_name(ErrorCode::kInternal), "Internal");
  EXPECT_EQ(error_code_name(ErrorCode::kNotFound), "NotFound");
  EXPECT_EQ(error_code_name(ErrorCode::kPermissionDenied), "PermissionDenied");
}

TEST(ErrorTest, WhatCarriesCodeNameAndMessage) {
  const InvalidArgumentError e("size 12Q is bad");
  EXPECT_STREQ(e.what(), "InvalidArgument: size 12Q is bad");
  EXPECT_EQ(e.message(), "size 12Q is bad");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
}

template <typename E>
void expect_code(ErrorCode code, const std::string& prefix) {
  try {
    throw E("m");
  } catch (const Error& e) {  // every error is caught as vtpu::Error ...
    EXPECT_EQ(e.code(), code);
    EXPECT_EQ(std::string(e.what()), prefix + ": m");
  }
  try {
    throw E("m");
  } catch (const std::runtime_error& e) {  // ... and as std::runtime_error
    EXPECT_EQ(std::string(e.what()), prefix + ": m");
  }
}

TEST(ErrorTest, EachTypeHasItsCode) {
  expect_code<InvalidArgumentError>(ErrorCode::kInvalidArgument, "InvalidArgument");
  expect_code<ResourceExhaustedError>(ErrorCode::kResourceExhausted, "ResourceExhausted");
  expect_code<DeadlineExceededError>(ErrorCode::kDeadlineExceeded, "DeadlineExceeded");
  expect_code<AbortedError>(ErrorCode::kAborted, "Aborted");
  expect_code<FailedPreconditionError>(ErrorCode::kFailedPrecondition, "FailedPrecondition");
  expect_code<UnimplementedError>(ErrorCode::kUnimplemented, "Unimplemented");
  expect_code<InternalError>(ErrorCode::kInternal, "Internal");
  expect_code<NotFoundError>(ErrorCode::kNotFound, "NotFound");
  expect_code<PermissionDeniedError>(ErrorCode::kPermissionDenied, "PermissionDenied");
}

// A file that exists but may not be read is not "not found".
TEST(ErrorTest, FileOpenErrorsKeepTheirCause) {
  const auto code_of = [](int err) {
    try {
      throw_file_open_error("test file", "/x", err);
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("'/x'"), std::string::npos) << e.message();
      return e.code();
    }
    return ErrorCode::kInternal;
  };
  EXPECT_EQ(code_of(ENOENT), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(ENOTDIR), ErrorCode::kNotFound);
  EXPECT_EQ(code_of(EACCES), ErrorCode::kPermissionDenied);
  EXPECT_EQ(code_of(EPERM), ErrorCode::kPermissionDenied);
  EXPECT_EQ(code_of(ELOOP), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace vtpu
