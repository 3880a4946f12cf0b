//===- Machine.cpp - what was measured, when, with which libraries --------===//

#include "BmrtVersion.h" // generated: BMRT_VERSION, git describe
#include "Calibrate.h"

#include <cblas.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <fstream>
#include <set>
#include <thread>

namespace bmrt::calibrate {
namespace {

constexpr size_t kHostNameBytes = 256;

std::string utcNow() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string hostName() {
  char name[kHostNameBytes] = {};
  if (gethostname(name, sizeof name - 1) != 0)
    return "unknown";
  return name;
}

/// The first "model name" of /proc/cpuinfo.
std::string cpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      size_t start = line.find_first_not_of(" \t", colon + 1);
      return start == std::string::npos ? "" : line.substr(start);
    }
  return "unknown";
}

/// Distinct host names among the ranks (collective).
int countHosts(Communicator &world, Stream &stream) {
  std::vector<char> mine(kHostNameBytes, '\0');
  std::string name = hostName();
  std::memcpy(mine.data(), name.data(),
              std::min(name.size(), kHostNameBytes - 1));
  std::vector<char> all(kHostNameBytes * world.size());
  world.allGather(mine.data(), all.data(), kHostNameBytes, DType::Bool, stream);
  std::set<std::string> hosts;
  for (int r = 0; r < world.size(); ++r)
    hosts.insert(std::string(all.data() + r * kHostNameBytes));
  return static_cast<int>(hosts.size());
}

/// "0.3.21" from "OpenBLAS 0.3.21 DYNAMIC_ARCH ...".
std::string openblasVersion() {
  std::string config = openblas_get_config();
  const std::string prefix = "OpenBLAS ";
  if (config.rfind(prefix, 0) != 0)
    return config;
  std::string rest = config.substr(prefix.size());
  return rest.substr(0, rest.find(' '));
}

/// The first line of MPI_Get_library_version (callable before MPI_Init).
std::string mpiVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS)
    return "unknown";
  std::string version(text, length);
  version = version.substr(0, version.find('\n'));
  while (!version.empty() && (version.back() == '\0' || version.back() == ' '))
    version.pop_back();
  return version;
}

std::string compilerVersion() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return __VERSION__;
#endif
}

} // namespace

void describeMachine(Communicator &world, Stream &stream,
                     nlohmann::ordered_json &out) {
  out["date"] = utcNow();
  long pages = sysconf(_SC_PHYS_PAGES), pageBytes = sysconf(_SC_PAGESIZE);
  out["machine"] = {
      {"host", hostName()},
      {"cpu", cpuModel()},
      {"cores", std::thread::hardware_concurrency()},
      {"memory_bytes", int64_t(pages) * int64_t(pageBytes)},
      {"hosts", countHosts(world, stream)}};
  out["versions"] = {{"openblas", openblasVersion()},
                     {"mpi", mpiVersion()},
                     {"compiler", compilerVersion()},
                     {"bmrt", BMRT_VERSION}};
}

} // namespace bmrt::calibrate
