// A fresh directory under /tmp for one test, removed with everything in it afterwards.
#pragma once

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include <stdlib.h>

namespace test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string &prefix) {
    std::string templ = "/tmp/" + prefix + "-XXXXXX";
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
};

} // namespace test
