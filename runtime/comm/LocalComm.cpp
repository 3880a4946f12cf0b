//===- LocalComm.cpp - the single-process world ---------------------------===//
//
// A job of one rank needs no MPI: every collective over a group of one is a
// copy (or nothing, in place), and a rank can only exchange messages with
// itself inside groupStart / groupEnd. This is what a one-device trainer
// runs on when no launcher started it: no MPI_Init, no helper process.
// Buffers are host memory (the CPU device).
//
//===----------------------------------------------------------------------===//

#include "Backends.h"

#include "bmrt/Error.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bmrt {
namespace {

void copyUnlessSame(void *to, const void *from, size_t bytes) {
  if (to != from && bytes)
    std::memcpy(to, from, bytes);
}

class LocalCommunicator final : public BlockingCommunicator {
public:
  explicit LocalCommunicator(std::string name)
      : BlockingCommunicator(std::move(name), 0, 1) {}

protected:
  void doAllReduce(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) override {
    stream.synchronize();
    copyUnlessSame(recv, send, count * sizeOf(type));
  }
  void doReduceScatter(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    stream.synchronize();
    copyUnlessSame(recv, send, recvCount * sizeOf(type));
  }
  void doAllGather(const void *send, void *recv, size_t sendCount, DType type,
                   Stream &stream) override {
    stream.synchronize();
    copyUnlessSame(recv, send, sendCount * sizeOf(type));
  }
  void doAllToAll(const void *send, void *recv, size_t chunkCount, DType type,
                  Stream &stream) override {
    stream.synchronize();
    copyUnlessSame(recv, send, chunkCount * sizeOf(type));
  }

  // Only grouped transfers with itself reach here (Communicator::send
  // refuses the rest); they are matched in posting order at groupEnd.
  void doSend(const void *buffer, size_t count, DType type, int, bool,
              Stream &stream) override {
    stream.synchronize();
    sends.push_back({const_cast<void *>(buffer), count * sizeOf(type)});
  }
  void doRecv(void *buffer, size_t count, DType type, int, bool,
              Stream &stream) override {
    stream.synchronize();
    recvs.push_back({buffer, count * sizeOf(type)});
  }
  void doGroupEnd() override {
    std::vector<Transfer> posted = std::move(sends), wanted = std::move(recvs);
    sends.clear();
    recvs.clear();
    BMRT_CHECK(posted.size() == wanted.size(),
               describe("groupEnd") + ": " + std::to_string(posted.size()) +
                   " sends but " + std::to_string(wanted.size()) + " recvs");
    for (size_t i = 0; i < posted.size(); ++i) {
      BMRT_CHECK(posted[i].bytes == wanted[i].bytes,
                 describe("recv") + ": a message of " +
                     std::to_string(posted[i].bytes) + " bytes for " +
                     std::to_string(wanted[i].bytes));
      copyUnlessSame(wanted[i].buffer, posted[i].buffer, posted[i].bytes);
    }
  }
  void doBarrier() override {}

private:
  struct Transfer {
    void *buffer;
    size_t bytes;
  };
  std::vector<Transfer> sends, recvs;
};

class LocalWorld final : public World {
public:
  LocalWorld() : World(0, 1) {}
  const char *backend() const override { return "local"; }

protected:
  std::unique_ptr<Communicator> split(int, int,
                                      const std::string &name) override {
    return std::make_unique<LocalCommunicator>(name);
  }
  [[noreturn]] void terminate() override {
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
};

} // namespace

std::unique_ptr<World> createLocalWorld() {
  return std::make_unique<LocalWorld>();
}

} // namespace bmrt
