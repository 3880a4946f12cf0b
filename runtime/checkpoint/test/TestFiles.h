//===- TestFiles.h - scratch folders, raw files, errors ---------*- C++ -*-===//
//
// Test-only helpers for the checkpoint and trainer tests: a fresh folder
// per test, removed afterwards; files written byte for byte (to build
// malformed inputs); and the message of the bmrt::Error a call throws.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_TEST_TESTFILES_H
#define BMRT_CHECKPOINT_TEST_TESTFILES_H

#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace bmrt::test {

/// A folder of its own for the running test.
class ScratchDir {
public:
  ScratchDir() {
    const auto *info = ::testing::UnitTest::GetInstance()->current_test_info();
    root = std::filesystem::path(::testing::TempDir()) /
           ("bmrt-" + std::string(info->test_suite_name()) + "-" +
            info->name() + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
  }
  ~ScratchDir() { std::filesystem::remove_all(root); }
  std::string path(const std::string &name) const {
    return (root / name).string();
  }

private:
  std::filesystem::path root;
};

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// The message of the bmrt::Error `call` throws; "(no error)" if none.
template <typename F> std::string errorOf(F &&call) {
  try {
    call();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

} // namespace bmrt::test

/// Expects STATEMENT to throw a one-line bmrt::Error containing TEXT.
#define EXPECT_ERROR(statement, text)                                          \
  do {                                                                         \
    std::string message_ = ::bmrt::test::errorOf([&] { statement; });          \
    EXPECT_NE(message_.find(text), std::string::npos)                          \
        << "message: " << message_;                                            \
    EXPECT_EQ(message_.find('\n'), std::string::npos)                          \
        << "not one line: " << message_;                                       \
  } while (false)

#endif // BMRT_CHECKPOINT_TEST_TESTFILES_H
