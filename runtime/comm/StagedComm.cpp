//===- StagedComm.cpp - host-memory communicators for device memory -------===//

#include "bmrt/StagedComm.h"

#include <vector>

namespace bmrt {
namespace {

using Bytes = std::vector<char>;

class StagedCommunicator final : public BlockingCommunicator {
public:
  StagedCommunicator(std::unique_ptr<Communicator> host, Device &device)
      : BlockingCommunicator(host->name(), host->rank(), host->size()),
        host(std::move(host)), device(device) {
    setWorldRanks(this->host->worldRanks());
  }
  const char *transport() const override { return "staged"; }

protected:
  void doAllReduce(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) override {
    Bytes buffer = toHost(send, count * sizeOf(type), stream);
    host->allReduce(buffer.data(), buffer.data(), count, type, stream);
    toDevice(recv, buffer, stream);
  }

  void doReduceScatter(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    size_t chunk = recvCount * sizeOf(type);
    Bytes buffer = toHost(send, chunk * size(), stream);
    char *mine = buffer.data() + chunk * rank();
    host->reduceScatter(buffer.data(), mine, recvCount, type, stream);
    toDevice(recv, mine, chunk, stream);
  }

  void doAllGather(const void *send, void *recv, size_t sendCount, DType type,
                   Stream &stream) override {
    size_t chunk = sendCount * sizeOf(type);
    Bytes buffer(chunk * size());
    char *mine = buffer.data() + chunk * rank();
    device.copyToHost(mine, send, chunk, stream);
    stream.synchronize();
    host->allGather(mine, buffer.data(), sendCount, type, stream);
    toDevice(recv, buffer, stream);
  }

  void doAllToAll(const void *send, void *recv, size_t chunkCount, DType type,
                  Stream &stream) override {
    size_t bytes = chunkCount * sizeOf(type) * size();
    Bytes sent = toHost(send, bytes, stream), received(bytes);
    host->allToAll(sent.data(), received.data(), chunkCount, type, stream);
    toDevice(recv, received, stream);
  }

  void doSend(const void *buffer, size_t count, DType type, int peer,
              bool grouped, Stream &stream) override {
    auto staged =
        std::make_unique<Bytes>(toHost(buffer, count * sizeOf(type), stream));
    if (grouped)
      openHostGroup();
    host->send(staged->data(), count, type, peer, stream);
    // A grouped send's buffer must live until the group ends.
    if (grouped)
      sendsInFlight.push_back(std::move(staged));
  }

  void doRecv(void *buffer, size_t count, DType type, int peer, bool grouped,
              Stream &stream) override {
    auto staged = std::make_unique<Bytes>(count * sizeOf(type));
    if (grouped)
      openHostGroup();
    host->recv(staged->data(), count, type, peer, stream);
    if (grouped)
      recvsInFlight.push_back({buffer, std::move(staged)});
    else
      toDevice(buffer, *staged, stream);
  }

  void doGroupEnd() override {
    if (hostGroupOpen) {
      hostGroupOpen = false;
      host->groupEnd();
    }
    Stream &stream = device.computeStream();
    for (auto &[to, staged] : recvsInFlight)
      device.copyToDevice(to, staged->data(), staged->size(), stream);
    stream.synchronize();
    recvsInFlight.clear();
    sendsInFlight.clear();
  }

  void doBarrier() override { host->barrier(); }

private:
  Bytes toHost(const void *from, size_t bytes, Stream &stream) {
    Bytes buffer(bytes);
    device.copyToHost(buffer.data(), from, bytes, stream);
    stream.synchronize();
    return buffer;
  }
  /// Returns once the copy has landed: the buffer may go.
  void toDevice(void *to, const void *from, size_t bytes, Stream &stream) {
    device.copyToDevice(to, from, bytes, stream);
    stream.synchronize();
  }
  void toDevice(void *to, const Bytes &from, Stream &stream) {
    toDevice(to, from.data(), from.size(), stream);
  }
  void openHostGroup() {
    if (!hostGroupOpen)
      host->groupStart();
    hostGroupOpen = true;
  }

  std::unique_ptr<Communicator> host;
  Device &device;
  bool hostGroupOpen = false;
  std::vector<std::unique_ptr<Bytes>> sendsInFlight;
  std::vector<std::pair<void *, std::unique_ptr<Bytes>>> recvsInFlight;
};

} // namespace

std::unique_ptr<Communicator> stageThroughHost(std::unique_ptr<Communicator> host,
                                               Device &device) {
  return std::make_unique<StagedCommunicator>(std::move(host), device);
}

} // namespace bmrt
