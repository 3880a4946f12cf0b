//===- NcclComm.cpp - NCCL's communicators --------------------------------===//
//
// One NCCL communicator per group (issue 23), bootstrapped through the
// group's host communicator: group rank 0 makes the unique id and every
// member learns it by an all-gather, then calls ncclCommInitRank. The host
// communicator stays for barriers and for the trainer's few host-memory
// buffers (the loss, the norms' sums), which NCCL cannot read.
//
// libnccl.so.2 is loaded at run time (dlopen), not linked: a CUDA build
// then runs where NCCL is absent (staging through host memory instead),
// and a GPU machine may bring its own NCCL (PyTorch's wheel does).
//
// Blocking operations wait for their stream inside the call, polling
// ncclCommGetAsyncError, so that the collective timeout (Watchdog.h) sees
// the wait and a peer's failure surfaces as one line rather than a hang;
// the asynchronous all-reduce and reduce-scatter (the gradient buckets)
// return at once with an event to test, and overlap the backward.
//
// Not yet run on a GPU: see the README's "Many GPUs" for what has been.
//
//===----------------------------------------------------------------------===//

#include "Nccl.h"

#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaCheck.h"

#include "bmrt/Error.h"

#include <nccl.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <dlfcn.h>
#include <unistd.h>

namespace bmrt {
namespace {

/// The NCCL functions bmrt calls, from libnccl.so.2.
struct NcclApi {
  ncclResult_t (*getVersion)(int *);
  const char *(*getErrorString)(ncclResult_t);
  ncclResult_t (*getUniqueId)(ncclUniqueId *);
  ncclResult_t (*commInitRank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  ncclResult_t (*allReduce)(const void *, void *, size_t, ncclDataType_t,
                            ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, ncclDataType_t,
                                ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*allGather)(const void *, void *, size_t, ncclDataType_t,
                            ncclComm_t, cudaStream_t);
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t,
                       cudaStream_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
};

template <typename Fn> bool bind(void *library, const char *name, Fn &fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  return fn != nullptr;
}

/// The loaded API, or null where libnccl.so.2 does not load or lacks a
/// function (loaded once per process).
const NcclApi *loadNccl() {
  static const NcclApi *api = []() -> const NcclApi * {
    void *library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!library)
      return nullptr;
    static NcclApi loaded;
    bool ok =
        bind(library, "ncclGetVersion", loaded.getVersion) &&
        bind(library, "ncclGetErrorString", loaded.getErrorString) &&
        bind(library, "ncclGetUniqueId", loaded.getUniqueId) &&
        bind(library, "ncclCommInitRank", loaded.commInitRank) &&
        bind(library, "ncclCommDestroy", loaded.commDestroy) &&
        bind(library, "ncclCommAbort", loaded.commAbort) &&
        bind(library, "ncclCommGetAsyncError", loaded.commGetAsyncError) &&
        bind(library, "ncclAllReduce", loaded.allReduce) &&
        bind(library, "ncclReduceScatter", loaded.reduceScatter) &&
        bind(library, "ncclAllGather", loaded.allGather) &&
        bind(library, "ncclSend", loaded.send) &&
        bind(library, "ncclRecv", loaded.recv) &&
        bind(library, "ncclGroupStart", loaded.groupStart) &&
        bind(library, "ncclGroupEnd", loaded.groupEnd);
    return ok ? &loaded : nullptr;
  }();
  return api;
}

ncclDataType_t ncclTypeOf(DType type) {
  switch (type) {
  case DType::F32:
    return ncclFloat32;
  case DType::I64:
    return ncclInt64;
  case DType::I32:
    return ncclInt32;
  case DType::Bool:
    return ncclUint8;
  }
  BMRT_FAIL("NCCL has no type for " + std::string(nameOf(type)));
}

/// Whether `pointer` is host memory, which NCCL cannot read (the trainer's
/// scalars); CUDA's unified addressing tells.
bool isHostMemory(const void *pointer) {
  cudaPointerAttributes attributes;
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    cudaGetLastError(); // an unregistered host pointer on older drivers
    return true;
  }
  return attributes.type != cudaMemoryTypeDevice &&
         attributes.type != cudaMemoryTypeManaged;
}

/// How long a wait sleeps between polls: short against a collective's
/// microseconds, long enough not to take a core from the host's work.
constexpr auto kPoll = std::chrono::microseconds(20);

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(std::unique_ptr<Communicator> host, const NcclApi &api,
                   ncclComm_t comm)
      : Communicator(host->name(), host->rank(), host->size()),
        host(std::move(host)), api(api), comm(comm) {
    setWorldRanks(this->host->worldRanks());
  }
  ~NcclCommunicator() override { api.commDestroy(comm); }

  const char *transport() const override { return "nccl"; }

  /// Throws, naming `what`, if NCCL reported an error for this
  /// communicator while its operations ran (a peer gone, a network error).
  void checkAsync(const char *what) {
    ncclResult_t state = ncclSuccess;
    check(api.commGetAsyncError(comm, &state), what);
    if (state != ncclSuccess && state != ncclInProgress) {
      api.commAbort(comm);
      BMRT_FAIL("NCCL " + describe(what) +
                " failed: " + api.getErrorString(state));
    }
  }

protected:
  void doAllReduce(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) override {
    if (isHostMemory(send) || isHostMemory(recv))
      return host->allReduce(send, recv, count, type, stream);
    startAllReduce(send, recv, count, type, stream);
    finish(stream, "all-reduce");
  }

  void doReduceScatter(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    if (isHostMemory(send) || isHostMemory(recv))
      return host->reduceScatter(send, recv, recvCount, type, stream);
    startReduceScatter(send, recv, recvCount, type, stream);
    finish(stream, "reduce-scatter");
  }

  std::unique_ptr<PendingCollective::Operation>
  doAllReduceAsync(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) override {
    if (isHostMemory(send) || isHostMemory(recv)) {
      host->allReduce(send, recv, count, type, stream);
      return nullptr;
    }
    startAllReduce(send, recv, count, type, stream);
    return pending(stream, "all-reduce");
  }

  std::unique_ptr<PendingCollective::Operation>
  doReduceScatterAsync(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    if (isHostMemory(send) || isHostMemory(recv)) {
      host->reduceScatter(send, recv, recvCount, type, stream);
      return nullptr;
    }
    startReduceScatter(send, recv, recvCount, type, stream);
    return pending(stream, "reduce-scatter");
  }

  void doAllGather(const void *send, void *recv, size_t sendCount, DType type,
                   Stream &stream) override {
    if (isHostMemory(send) || isHostMemory(recv))
      return host->allGather(send, recv, sendCount, type, stream);
    check(api.allGather(send, recv, sendCount, ncclTypeOf(type), comm,
                        cuda::cudaStreamOf(stream)),
          "all-gather");
    finish(stream, "all-gather");
  }

  // NCCL has no all-to-all of its own: a group of one send and one recv
  // per peer is how its documentation builds one.
  void doAllToAll(const void *send, void *recv, size_t chunkCount, DType type,
                  Stream &stream) override {
    requireDevice(send, "all-to-all");
    requireDevice(recv, "all-to-all");
    size_t chunk = chunkCount * sizeOf(type);
    cudaStream_t s = cuda::cudaStreamOf(stream);
    check(api.groupStart(), "all-to-all");
    for (int peer = 0; peer < size(); ++peer) {
      check(api.send(static_cast<const char *>(send) + peer * chunk, chunkCount,
                     ncclTypeOf(type), peer, comm, s),
            "all-to-all");
      check(api.recv(static_cast<char *>(recv) + peer * chunk, chunkCount,
                     ncclTypeOf(type), peer, comm, s),
            "all-to-all");
    }
    check(api.groupEnd(), "all-to-all");
    finish(stream, "all-to-all");
  }

  void doSend(const void *buffer, size_t count, DType type, int peer,
              bool grouped, Stream &stream) override {
    requireDevice(buffer, "send");
    openGroup(grouped, stream);
    check(api.send(buffer, count, ncclTypeOf(type), peer, comm,
                   cuda::cudaStreamOf(stream)),
          "send");
    if (!grouped)
      finish(stream, "send");
  }

  void doRecv(void *buffer, size_t count, DType type, int peer, bool grouped,
              Stream &stream) override {
    requireDevice(buffer, "recv");
    openGroup(grouped, stream);
    check(api.recv(buffer, count, ncclTypeOf(type), peer, comm,
                   cuda::cudaStreamOf(stream)),
          "recv");
    if (!grouped)
      finish(stream, "recv");
  }

  void doGroupEnd() override {
    if (!groupStream)
      return;
    Stream &stream = *groupStream;
    groupStream = nullptr;
    check(api.groupEnd(), "group of transfers");
    finish(stream, "group of transfers");
  }

  void doBarrier() override { host->barrier(); }

private:
  class Pending;

  void check(ncclResult_t result, const char *what) {
    if (result == ncclSuccess || result == ncclInProgress)
      return;
    BMRT_FAIL("NCCL " + describe(what) +
              " failed: " + api.getErrorString(result));
  }
  void requireDevice(const void *buffer, const char *what) {
    BMRT_CHECK(!isHostMemory(buffer),
               "NCCL " + describe(what) +
                   " was given host memory; its buffers must be on the GPU");
  }
  void startAllReduce(const void *send, void *recv, size_t count, DType type,
                      Stream &stream) {
    check(api.allReduce(send, recv, count, ncclTypeOf(type), ncclSum, comm,
                        cuda::cudaStreamOf(stream)),
          "all-reduce");
  }
  void startReduceScatter(const void *send, void *recv, size_t recvCount,
                          DType type, Stream &stream) {
    check(api.reduceScatter(send, recv, recvCount, ncclTypeOf(type), ncclSum,
                            comm, cuda::cudaStreamOf(stream)),
          "reduce-scatter");
  }
  /// A transfer posted inside groupStart / groupEnd opens NCCL's group
  /// with the first of them; the group ends on that stream.
  void openGroup(bool grouped, Stream &stream) {
    if (!grouped || groupStream)
      return;
    check(api.groupStart(), "group of transfers");
    groupStream = &stream;
  }
  /// Returns once `stream` has run everything enqueued on it, throwing if
  /// NCCL reports an error meanwhile.
  void finish(Stream &stream, const char *what) {
    cudaStream_t s = cuda::cudaStreamOf(stream);
    for (;;) {
      cudaError_t state = cudaStreamQuery(s);
      if (state == cudaSuccess)
        return;
      if (state != cudaErrorNotReady)
        BMRT_CUDA_CHECK(state);
      checkAsync(what);
      std::this_thread::sleep_for(kPoll);
    }
  }
  std::unique_ptr<PendingCollective::Operation> pending(Stream &stream,
                                                        const char *what);

  std::unique_ptr<Communicator> host;
  const NcclApi &api;
  ncclComm_t comm;
  /// The stream of the open group of transfers; null outside one.
  Stream *groupStream = nullptr;
};

/// An all-reduce or reduce-scatter enqueued and not waited for: an event
/// after it on its stream.
class NcclCommunicator::Pending final : public PendingCollective::Operation {
public:
  Pending(NcclCommunicator &owner, cudaStream_t stream, const char *what)
      : owner(owner), what(what) {
    BMRT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    BMRT_CUDA_CHECK(cudaEventRecord(event, stream));
  }
  ~Pending() override { cudaEventDestroy(event); }

  bool test() override {
    cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess)
      return true;
    if (state != cudaErrorNotReady)
      BMRT_CUDA_CHECK(state);
    owner.checkAsync(what);
    return false;
  }
  void wait() override {
    while (!test())
      std::this_thread::sleep_for(kPoll);
  }

private:
  NcclCommunicator &owner;
  const char *what;
  cudaEvent_t event = nullptr;
};

std::unique_ptr<PendingCollective::Operation>
NcclCommunicator::pending(Stream &stream, const char *what) {
  return std::make_unique<Pending>(*this, cuda::cudaStreamOf(stream), what);
}

/// What tells this rank's GPU from another's: the host and the GPU's PCI
/// bus id, in a fixed-size record that the group all-gathers; its first
/// byte says whether this rank can run NCCL at all.
using DeviceKey = std::array<char, 128>;

DeviceKey keyOf(bool canRun) {
  DeviceKey key{};
  key[0] = canRun ? 1 : 0;
  int ordinal = 0;
  char bus[32] = "";
  if (canRun && cudaGetDevice(&ordinal) == cudaSuccess)
    cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal);
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  std::snprintf(key.data() + 1, key.size() - 1, "%s/%s", host, bus);
  return key;
}

/// Whether every rank of `host` can run NCCL on a GPU of its own: the same
/// answer on every rank.
bool everyRankHasItsOwnGpu(Communicator &host, bool canRun, Stream &stream) {
  std::vector<DeviceKey> keys(host.size());
  DeviceKey mine = keyOf(canRun);
  host.allGather(mine.data(), keys.data(), mine.size(), DType::Bool, stream);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!keys[i][0])
      return false;
    for (size_t j = 0; j < i; ++j)
      if (keys[i] == keys[j])
        return false;
  }
  return true;
}

bool ncclWanted() {
  const char *wanted = std::getenv("BMRT_NCCL");
  return !wanted || std::strcmp(wanted, "0") != 0;
}

} // namespace

std::unique_ptr<Communicator>
ncclCommunicator(std::unique_ptr<Communicator> &host, Device &device) {
  if (device.backend().name != std::string("cuda"))
    return nullptr;
  const NcclApi *api = ncclWanted() ? loadNccl() : nullptr;
  Stream &stream = device.computeStream();
  if (!everyRankHasItsOwnGpu(*host, api != nullptr, stream))
    return nullptr;
  ncclUniqueId id{};
  if (host->rank() == 0)
    BMRT_CHECK(api->getUniqueId(&id) == ncclSuccess,
               "ncclGetUniqueId failed for the group " + host->name());
  std::vector<ncclUniqueId> ids(host->size());
  host->allGather(&id, ids.data(), sizeof id, DType::Bool, stream);
  ncclComm_t comm = nullptr;
  ncclResult_t made =
      api->commInitRank(&comm, host->size(), ids[0], host->rank());
  BMRT_CHECK(made == ncclSuccess, "ncclCommInitRank for the group " +
                                      host->name() +
                                      " failed: " + api->getErrorString(made));
  return std::make_unique<NcclCommunicator>(std::move(host), *api, comm);
}

} // namespace bmrt
