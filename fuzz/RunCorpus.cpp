//===- RunCorpus.cpp - run a fuzz target over files, without libFuzzer ----===//
//
// The ordinary (g++) build links each fuzz target with this main instead of
// libFuzzer's: it feeds every file named on the command line (folders are
// walked, in name order) to LLVMFuzzerTestOneInput once. ctest runs it over
// the committed seeds and crash regressions, so a fixed crash stays fixed on
// machines without clang. It prints how many inputs ran; a crash is the
// failure.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace fs = std::filesystem;

namespace {

/// The files under `path` (itself if it is a file), sorted.
std::vector<fs::path> inputsUnder(const fs::path &path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const fs::directory_entry &entry :
         fs::recursive_directory_iterator(path))
      if (entry.is_regular_file())
        files.push_back(entry.path());
  } else {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  return files;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE_OR_FOLDER...\n", argv[0]);
    return 2;
  }
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    if (!fs::exists(argv[i])) {
      std::fprintf(stderr, "%s: error: '%s' does not exist\n", argv[0],
                   argv[i]);
      return 2;
    }
    for (const fs::path &file : inputsUnder(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)),
                        std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) {
        std::fprintf(stderr, "%s: error: cannot read '%s'\n", argv[0],
                     file.c_str());
        return 2;
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                             bytes.size());
      ++ran;
    }
  }
  std::printf("ran %zu inputs\n", ran);
  return 0;
}
