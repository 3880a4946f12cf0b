//===- MpiComm.cpp - the MPI backend --------------------------------------===//
//
// Each Communicator is an MPI communicator from MPI_Comm_split, and each
// collective is the matching MPI library call on host memory. MPI calls
// block, so an operation first synchronises its stream (the buffers must
// hold what was enqueued before it; free on the CPU, where streams run work
// at once) and is complete when it returns. The asynchronous all-reduce and
// reduce-scatter are MPI's nonblocking collectives (MPI_Iallreduce,
// MPI_Ireduce_scatter_block): with one thread per rank they progress while
// the rank is inside MPI, so their owner tests them between its kernels.
//
// Errors: MPI_ERRORS_RETURN instead of MPI's default abort, so that every
// failed call becomes a bmrt::Error of one line naming the operation, the
// group, the rank and MPI's error string; the trainer then ends the job
// through abortJob (MPI_Abort).
//
// Threads: only the thread that created the World calls MPI
// (MPI_THREAD_FUNNELED); OpenMP kernels never communicate, and the
// collective timeout's watchdog thread ends the process without MPI
// (Watchdog.cpp says why).
//
//===----------------------------------------------------------------------===//

#include "Backends.h"
#include "Watchdog.h"

#include "bmrt/Error.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

namespace bmrt {
namespace {

MPI_Datatype mpiTypeOf(DType type) {
  switch (type) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::I64:
    return MPI_INT64_T;
  case DType::I32:
    return MPI_INT32_T;
  case DType::Bool:
    return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, length);
}

/// MPI's buffers without const, as its C bindings before MPI-3 had them.
void *mutableBuffer(const void *buffer) { return const_cast<void *>(buffer); }

/// One transfer posted inside groupStart / groupEnd.
struct Posted {
  const char *call;
  int peer;
  int count; // elements a recv expects; -1 for a send
  MPI_Datatype type;
};

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(MPI_Comm comm, std::string name, int rank, int size)
      : Communicator(std::move(name), rank, size), comm(comm) {}

  ~MpiCommunicator() override {
    // After MPI_Finalize (a World destroyed first) MPI has freed it.
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Comm_free(&comm);
  }

protected:
  void doAllReduce(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) override {
    stream.synchronize();
    check(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv,
                        countOf(count, "MPI_Allreduce"), mpiTypeOf(type),
                        MPI_SUM, comm),
          "MPI_Allreduce");
  }

  void doReduceScatter(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    stream.synchronize();
    int count = countOf(recvCount, "MPI_Reduce_scatter_block");
    size_t bytes = recvCount * sizeOf(type);
    const char *ownChunk = static_cast<const char *>(send) + rank() * bytes;
    if (recv != ownChunk) {
      check(MPI_Reduce_scatter_block(send, recv, count, mpiTypeOf(type),
                                     MPI_SUM, comm),
            "MPI_Reduce_scatter_block");
      return;
    }
    // In place, MPI leaves the result at the start of the buffer; NCCL's
    // convention (which Comm.h follows) wants it in this rank's chunk.
    void *whole = mutableBuffer(send);
    check(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, count, mpiTypeOf(type),
                                   MPI_SUM, comm),
          "MPI_Reduce_scatter_block");
    if (rank() != 0)
      std::memmove(recv, whole, bytes);
  }

  std::unique_ptr<PendingCollective::Operation>
  doAllReduceAsync(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) override {
    stream.synchronize();
    auto op = std::make_unique<Operation>(*this, "MPI_Iallreduce");
    check(MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv,
                         countOf(count, op->call), mpiTypeOf(type), MPI_SUM,
                         comm, &op->request),
          op->call);
    return op;
  }

  std::unique_ptr<PendingCollective::Operation>
  doReduceScatterAsync(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    stream.synchronize();
    auto op = std::make_unique<Operation>(*this, "MPI_Ireduce_scatter_block");
    int count = countOf(recvCount, op->call);
    size_t bytes = recvCount * sizeOf(type);
    const char *ownChunk = static_cast<const char *>(send) + rank() * bytes;
    if (recv != ownChunk) {
      check(MPI_Ireduce_scatter_block(send, recv, count, mpiTypeOf(type),
                                      MPI_SUM, comm, &op->request),
            op->call);
      return op;
    }
    // In place, as doReduceScatter: moved to this rank's chunk once done.
    void *whole = mutableBuffer(send);
    check(MPI_Ireduce_scatter_block(MPI_IN_PLACE, whole, count,
                                    mpiTypeOf(type), MPI_SUM, comm,
                                    &op->request),
          op->call);
    if (rank() != 0)
      op->moveWhenDone = {recv, whole, bytes};
    return op;
  }

  void doAllGather(const void *send, void *recv, size_t sendCount, DType type,
                   Stream &stream) override {
    stream.synchronize();
    // MPI's in-place all-gather takes this rank's part from its place in
    // recv: exactly the in-place case of Comm.h.
    size_t bytes = sendCount * sizeOf(type);
    bool inPlace = send == static_cast<const char *>(recv) + rank() * bytes;
    int count = countOf(sendCount, "MPI_Allgather");
    check(MPI_Allgather(inPlace ? MPI_IN_PLACE : send, count, mpiTypeOf(type),
                        recv, count, mpiTypeOf(type), comm),
          "MPI_Allgather");
  }

  void doAllToAll(const void *send, void *recv, size_t chunkCount, DType type,
                  Stream &stream) override {
    stream.synchronize();
    int count = countOf(chunkCount, "MPI_Alltoall");
    check(MPI_Alltoall(send, count, mpiTypeOf(type), recv, count,
                       mpiTypeOf(type), comm),
          "MPI_Alltoall");
  }

  void doSend(const void *buffer, size_t count, DType type, int peer,
              bool grouped, Stream &stream) override {
    stream.synchronize();
    const char *call = grouped ? "MPI_Isend" : "MPI_Send";
    int n = countOf(count, call);
    if (!grouped) {
      check(MPI_Send(buffer, n, mpiTypeOf(type), peer, kTag, comm), call, peer);
      return;
    }
    MPI_Request request;
    check(MPI_Isend(buffer, n, mpiTypeOf(type), peer, kTag, comm, &request),
          call, peer);
    post(request, {call, peer, -1, mpiTypeOf(type)});
  }

  void doRecv(void *buffer, size_t count, DType type, int peer, bool grouped,
              Stream &stream) override {
    stream.synchronize();
    const char *call = grouped ? "MPI_Irecv" : "MPI_Recv";
    int n = countOf(count, call);
    if (!grouped) {
      MPI_Status status;
      check(MPI_Recv(buffer, n, mpiTypeOf(type), peer, kTag, comm, &status),
            call, peer);
      checkReceived(status, {call, peer, n, mpiTypeOf(type)});
      return;
    }
    MPI_Request request;
    check(MPI_Irecv(buffer, n, mpiTypeOf(type), peer, kTag, comm, &request),
          call, peer);
    post(request, {call, peer, n, mpiTypeOf(type)});
  }

  void doGroupEnd() override {
    std::vector<MPI_Request> requests = std::move(pendingRequests);
    std::vector<Posted> posted = std::move(pendingPosted);
    pendingRequests.clear();
    pendingPosted.clear();
    std::vector<MPI_Status> statuses(requests.size());
    int code = MPI_Waitall(static_cast<int>(requests.size()), requests.data(),
                           statuses.data());
    // With MPI_ERR_IN_STATUS each status says which transfer failed.
    for (size_t i = 0; i < posted.size(); ++i) {
      if (code == MPI_ERR_IN_STATUS)
        check(statuses[i].MPI_ERROR, posted[i].call, posted[i].peer);
      if (code == MPI_SUCCESS && posted[i].count >= 0)
        checkReceived(statuses[i], posted[i]);
    }
    check(code, "MPI_Waitall");
  }

  void doBarrier() override { check(MPI_Barrier(comm), "MPI_Barrier"); }

private:
  /// A nonblocking collective in flight: its request, and where an
  /// in-place reduce-scatter's result goes once it is complete.
  struct Operation final : PendingCollective::Operation {
    Operation(const MpiCommunicator &owner, const char *call)
        : owner(owner), call(call) {}
    bool test() override {
      int done = 0;
      owner.check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
      if (done)
        finish();
      return done;
    }
    void wait() override {
      owner.check(MPI_Wait(&request, MPI_STATUS_IGNORE), call);
      finish();
    }
    void finish() {
      if (moveWhenDone.bytes)
        std::memmove(moveWhenDone.to, moveWhenDone.from, moveWhenDone.bytes);
    }

    const MpiCommunicator &owner;
    const char *call;
    MPI_Request request = MPI_REQUEST_NULL;
    struct {
      void *to = nullptr;
      const void *from = nullptr;
      size_t bytes = 0;
    } moveWhenDone;
  };

  /// One tag for all transfers: MPI then matches messages between two ranks
  /// in posting order, as NCCL does.
  static constexpr int kTag = 0;

  /// Throws the one-line Error for a failed MPI call.
  void check(int code, const char *call, int peer = -1) const {
    if (code == MPI_SUCCESS || code == MPI_ERR_PENDING)
      return;
    std::string with =
        peer >= 0 ? " with rank " + std::to_string(peer) : std::string();
    BMRT_FAIL(describe(call) + with + " failed: " + mpiErrorText(code));
  }

  /// MPI counts are ints; a bigger buffer would need splitting.
  int countOf(size_t count, const char *call) const {
    BMRT_CHECK(count <= static_cast<size_t>(INT_MAX),
               describe(call) + ": " + std::to_string(count) +
                   " elements are more than MPI's int counts hold");
    return static_cast<int>(count);
  }

  /// A shorter message than expected is no MPI error; it is ours.
  void checkReceived(const MPI_Status &status, const Posted &what) const {
    int received = 0;
    MPI_Get_count(&status, what.type, &received);
    BMRT_CHECK(received == what.count,
               describe(what.call) + " with rank " + std::to_string(what.peer) +
                   ": got " + std::to_string(received) +
                   " elements, expected " + std::to_string(what.count));
  }

  void post(MPI_Request request, Posted what) {
    pendingRequests.push_back(request);
    pendingPosted.push_back(what);
  }

  MPI_Comm comm;
  std::vector<MPI_Request> pendingRequests;
  std::vector<Posted> pendingPosted;
};

class MpiWorld final : public World {
public:
  MpiWorld(int rank, int size) : World(rank, size) {}

  ~MpiWorld() override {
    // An exception leaving the World's scope means some rank may be blocked
    // in a collective this one will never join, and MPI_Finalize would then
    // wait forever: end the job instead.
    if (std::uncaught_exceptions() > 0 && size() > 1)
      abortJob("an error left the scope of the communication World before "
               "it was reported (catch it and call abortJob)");
    // Open MPI's finalize waits for every rank (a PMIx fence): a rank that
    // stalls after its last step would hang the others here.
    WaitScope waiting({nullptr, "finalize"});
    MPI_Finalize();
  }

  const char *backend() const override { return "mpi"; }

protected:
  std::unique_ptr<Communicator> split(int color, int key,
                                      const std::string &name) override {
    MPI_Comm comm;
    int code = MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm);
    BMRT_CHECK(code == MPI_SUCCESS, "MPI_Comm_split for " + name + " on rank " +
                                        std::to_string(rank()) +
                                        " failed: " + mpiErrorText(code));
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int groupRank = 0, groupSize = 0;
    MPI_Comm_rank(comm, &groupRank);
    MPI_Comm_size(comm, &groupSize);
    return std::make_unique<MpiCommunicator>(comm, name, groupRank, groupSize);
  }

  [[noreturn]] void terminate() override {
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1); // MPI_Abort does not return; this is for the compiler.
  }
};

} // namespace

/// MPI_Init_thread under a watchdog of its own: every rank waits in it for
/// the others, before the World's watchdog (World::setTimeout) exists.
static int initMpi(double startTimeout, int &provided) {
  std::unique_ptr<Watchdog> startup;
  if (startTimeout > 0 && launcherSize() != 1)
    startup = std::make_unique<Watchdog>(startTimeout, launcherRank(),
                                         std::max(launcherSize(), 0));
  WaitScope waiting({nullptr, "MPI start-up (MPI_Init_thread)"});
  return MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
}

std::unique_ptr<World> createMpiWorld(double startTimeout) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  BMRT_CHECK(!initialized && !finalized,
             "MPI starts once per process, and it has already started");
  int provided = 0;
  int code = initMpi(startTimeout, provided);
  BMRT_CHECK(code == MPI_SUCCESS,
             "MPI_Init_thread failed: " + mpiErrorText(code));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    BMRT_FAIL("this MPI supports no threads beside its caller; the trainer "
              "needs MPI_THREAD_FUNNELED");
  }
  return std::make_unique<MpiWorld>(rank, size);
}

} // namespace bmrt
