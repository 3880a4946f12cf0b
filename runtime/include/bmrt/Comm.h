//===- Comm.h - communicators over mesh-axis groups -------------*- C++ -*-===//
//
// DESIGN.md section 5: one communicator per mesh-axis group, with
// flat-buffer collectives in the NCCL style (all-reduce, reduce-scatter,
// all-gather, all-to-all, send / recv) on device memory, ordered on a
// Stream. MPI implements them on CPUs (runtime/comm/MpiComm.cpp); an NCCL
// backend will implement the same interface on GPUs, so nothing here names
// MPI.
//
// One trainer binary runs on every rank (SPMD). The process creates one
// World, which starts the backend and knows the global rank and size; the
// step program asks it for the group of this rank along some mesh axes.
// Ranks lie on the mesh as bmc's plan numbers them: tp innermost, then ep,
// then dp, then pp (passes/plan/PLAN_SCHEMA.md).
//
// Failure: a bmrt::Error on any rank ends the whole job through abortJob(),
// never a hang (the other ranks may be blocked in a collective that will
// never complete). A rank that stalls or dies without an error is caught by
// the collective timeout (World::setTimeout): every blocking entry below
// records what it waits in, and a watchdog thread ends the job when a wait
// lasts too long (runtime/comm/Watchdog.h).
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_COMM_H
#define BMRT_COMM_H

#include "bmrt/Device.h"
#include "bmrt/Mesh.h"
#include "bmrt/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace bmrt {

class Communicator;
class Watchdog;

/// What a rank waits in, as the collective timeout's message names it.
struct WaitSite {
  /// The group; null for an operation of the whole job (a split, finalize).
  const Communicator *group = nullptr;
  /// As Communicator::describe names it: "all-reduce", "recv".
  const char *operation = "collective";
  /// The group rank of a transfer's peer; -1 for a collective, or a group
  /// of transfers with several peers.
  int peer = -1;
  /// The group's operations started so far, this one included: ranks call
  /// a group's collectives in one order, so the number says which one.
  uint64_t call = 0;
};

/// A collective started by Communicator::allReduceAsync or
/// reduceScatterAsync: NCCL's operation enqueued on a stream, with test()
/// and wait() in place of querying and synchronising its completion event.
/// Its buffers must stay untouched until test() has returned true or wait()
/// has returned. Errors are those of the blocking calls (bmrt::Error, which
/// ends the job through abortJob). Destroying one still in flight ends the
/// job (MPI would write buffers that may be freed), except while an error
/// unwinds the stack, which ends the job anyway.
class PendingCollective {
public:
  /// What a backend keeps for an operation in flight.
  class Operation {
  public:
    virtual ~Operation();
    /// Progresses the operation (MPI_Test); true once it is complete.
    virtual bool test() = 0;
    /// Returns once it is complete.
    virtual void wait() = 0;
  };

  /// A complete collective (what a backend that finishes at once returns).
  PendingCollective() = default;
  /// `site`: what wait() waits in, for the collective timeout (its group
  /// must outlive this).
  explicit PendingCollective(std::unique_ptr<Operation> operation,
                             WaitSite site = {})
      : operation(std::move(operation)), site(site) {}
  PendingCollective(PendingCollective &&) noexcept = default;
  PendingCollective &operator=(PendingCollective &&other) noexcept;
  ~PendingCollective();

  /// Progresses it once; true when it is complete (and from then on).
  bool test();
  /// Returns once it is complete.
  void wait();
  bool complete() const { return !operation; }

private:
  void abandon() noexcept;
  std::unique_ptr<Operation> operation;
  WaitSite site;
};

/// One group of ranks and its collectives.
///
/// Every rank of the group calls each collective in the same order with the
/// same count and type. Buffers are device memory (host memory on the CPU).
/// Counts are elements, not bytes. As in NCCL, an operation is ordered on
/// `stream` after the work enqueued on it before, and its result is certain
/// only after the stream is synchronised; backends that complete operations
/// before returning (MPI, the single-process one) are a special case of that
/// contract. Sums are of F32, I64 and I32; data movement takes every DType.
///
/// Buffers either coincide in the way an operation defines as in place or
/// do not overlap at all; anything else throws bmrt::Error.
class Communicator {
public:
  virtual ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// This rank's place in the group, 0 <= rank() < size().
  int rank() const { return groupRank; }
  int size() const { return groupSize; }
  /// What the group spans, for messages: "world", "tp", "dp+tp".
  const std::string &name() const { return groupName; }
  /// The world rank of each group rank, for messages; empty when the
  /// World did not create the group.
  const std::vector<int> &worldRanks() const { return members; }
  /// How its operations move data: "host" (the World's backend on host
  /// memory), "staged" (device memory through host copies) or "nccl".
  virtual const char *transport() const { return "host"; }

  /// recv[i] = sum over the group of send[i], for `count` elements. In place
  /// when send == recv.
  void allReduce(const void *send, void *recv, size_t count, DType type,
                 Stream &stream);
  /// `send` holds size() chunks of `recvCount` elements; this rank gets the
  /// sum over the group of chunk rank(). In place when
  /// recv == send + rank() * recvCount elements; the other chunks of `send`
  /// are then left undefined.
  void reduceScatter(const void *send, void *recv, size_t recvCount, DType type,
                     Stream &stream);
  /// recv (size() * sendCount elements) = every rank's `send`, in group-rank
  /// order. In place when send == recv + rank() * sendCount elements.
  void allGather(const void *send, void *recv, size_t sendCount, DType type,
                 Stream &stream);
  /// allReduce and reduceScatter started and not waited for, as
  /// ncclAllReduce returns once the operation is enqueued: the same
  /// checks, buffers and results, complete when the returned collective
  /// says so. Each rank starts the group's collectives, blocking or not, in
  /// the same order.
  PendingCollective allReduceAsync(const void *send, void *recv, size_t count,
                                   DType type, Stream &stream);
  PendingCollective reduceScatterAsync(const void *send, void *recv,
                                       size_t recvCount, DType type,
                                       Stream &stream);
  /// `send` and `recv` hold size() chunks of `chunkCount` elements: chunk j
  /// of this rank's send becomes chunk rank() of rank j's recv. Never in
  /// place.
  void allToAll(const void *send, void *recv, size_t chunkCount, DType type,
                Stream &stream);

  /// Point-to-point with group rank `peer`; messages between two ranks
  /// match in the order they are posted. Outside groupStart / groupEnd
  /// these block until the transfer is done, so two ranks that both send
  /// first may deadlock: group the calls (or order them) instead.
  void send(const void *buffer, size_t count, DType type, int peer,
            Stream &stream);
  void recv(void *buffer, size_t count, DType type, int peer, Stream &stream);

  /// NCCL's ncclGroupStart / ncclGroupEnd for point-to-point: send and recv
  /// between them are all posted, then complete together at groupEnd (MPI:
  /// before it returns; NCCL: in stream order), so exchanges between
  /// pipeline stages cannot deadlock whatever order the ranks post them in.
  /// Buffers must stay valid until the transfers are complete.
  /// Groups nest; only the outermost groupEnd waits. Collectives may not be
  /// called inside a group.
  void groupStart();
  void groupEnd();
  /// Returns once every rank of the group has called it.
  void barrier();

protected:
  Communicator(std::string name, int rank, int size);
  void setWorldRanks(std::vector<int> ranks) { members = std::move(ranks); }

  // What a backend implements, after the checks above have passed.
  virtual void doAllReduce(const void *send, void *recv, size_t count,
                           DType type, Stream &stream) = 0;
  virtual void doReduceScatter(const void *send, void *recv, size_t recvCount,
                               DType type, Stream &stream) = 0;
  /// Null when the operation is already complete.
  virtual std::unique_ptr<PendingCollective::Operation>
  doAllReduceAsync(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) = 0;
  virtual std::unique_ptr<PendingCollective::Operation>
  doReduceScatterAsync(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) = 0;
  virtual void doAllGather(const void *send, void *recv, size_t sendCount,
                           DType type, Stream &stream) = 0;
  virtual void doAllToAll(const void *send, void *recv, size_t chunkCount,
                          DType type, Stream &stream) = 0;
  /// `grouped`: inside groupStart / groupEnd, so post and return.
  virtual void doSend(const void *buffer, size_t count, DType type, int peer,
                      bool grouped, Stream &stream) = 0;
  virtual void doRecv(void *buffer, size_t count, DType type, int peer,
                      bool grouped, Stream &stream) = 0;
  /// Completes everything posted since the outermost groupStart.
  virtual void doGroupEnd() = 0;
  virtual void doBarrier() = 0;

  /// "all-reduce over tp (rank 1 of 2)": how messages name an operation.
  std::string describe(const char *operation) const;

private:
  void checkCollective(const char *operation) const;
  void checkAllReduce(const void *send, const void *recv, size_t count,
                      DType type) const;
  void checkReduceScatter(const void *send, const void *recv,
                          size_t recvCount, DType type) const;
  void checkPeer(const char *operation, int peer) const;
  /// The next operation of the group, counted (WaitSite::call).
  WaitSite nextCall(const char *operation, int peer = -1);
  /// Inside a group, notes a send's or recv's peer for groupEnd's site and
  /// returns true: the transfer is only posted, waits for nothing and is
  /// no call of its own (groupEnd is). False outside a group.
  bool notePosted(int peer);

  friend class World;
  std::string groupName;
  int groupRank;
  int groupSize;
  std::vector<int> members;
  int groupDepth = 0;
  uint64_t calls = 0;
  /// The one peer of the transfers posted in the open group: kNoPeer
  /// before the first, -1 once there are several.
  static constexpr int kNoPeer = -2;
  int groupPeer = kNoPeer;
};

/// A backend whose collectives are complete when they return (the
/// single-process one, the host-staged one): its asynchronous forms are
/// its blocking ones.
class BlockingCommunicator : public Communicator {
protected:
  using Communicator::Communicator;
  std::unique_ptr<PendingCollective::Operation>
  doAllReduceAsync(const void *send, void *recv, size_t count, DType type,
                   Stream &stream) final {
    doAllReduce(send, recv, count, type, stream);
    return nullptr;
  }
  std::unique_ptr<PendingCollective::Operation>
  doReduceScatterAsync(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) final {
    doReduceScatter(send, recv, recvCount, type, stream);
    return nullptr;
  }
};

[[noreturn]] void abortJob(const std::string &message); // below

/// The job: starts the communication backend once per process, knows this
/// rank's place among all ranks, and creates communicators. Destroy every
/// Communicator before the World.
class World {
public:
  virtual ~World();
  World(const World &) = delete;
  World &operator=(const World &) = delete;

  /// This process among all ranks of the job.
  int rank() const { return worldRank; }
  int size() const { return worldSize; }
  /// "mpi" or "local".
  virtual const char *backend() const = 0;

  /// The collective timeout: a rank that waits longer than `seconds` in
  /// one operation (a collective, a blocking transfer, a group's
  /// transfers, a barrier, PendingCollective::wait, a split, finalize)
  /// ends the whole job with one line naming the operation, the group and
  /// the rank it waits for (Watchdog.h). 0: wait forever. Waits that are
  /// long by design (the other ranks in a barrier while rank 0 writes a
  /// checkpoint) count alike. Starts one watchdog thread per process, and
  /// none for a job of one rank, which never waits for another.
  void setTimeout(double seconds);

  /// All ranks, in world-rank order. Collective: every rank calls it.
  std::unique_ptr<Communicator> all();
  /// This rank's group along `axes` of `mesh` (for example {"dp"}, or
  /// {"ep", "dp"} for the plan's whole data-parallel axis). Collective:
  /// every rank calls it with the same mesh and axes, in the same order as
  /// its other group() calls. Throws bmrt::Error, on every rank alike, when
  /// the mesh does not have size() ranks or names no such axis.
  std::unique_ptr<Communicator> group(const Mesh &mesh,
                                      const std::vector<std::string> &axes);
  /// One axis: group(mesh, "tp"). (A const char *, so that a braced list
  /// of two names cannot be taken for a std::string's iterator pair.)
  std::unique_ptr<Communicator> group(const Mesh &mesh, const char *axis) {
    return group(mesh, std::vector<std::string>{axis});
  }

protected:
  World(int rank, int size);

  /// Collective over all ranks: those passing the same `color` form one
  /// communicator, in which they are ranked by `key` (MPI_Comm_split's
  /// contract). An NCCL backend splits the same way over MPI, then group
  /// rank 0 calls ncclGetUniqueId and broadcasts the id over the new MPI
  /// communicator (MPI_Bcast of sizeof(ncclUniqueId) bytes), and every
  /// member calls ncclCommInitRank(&comm, size, id, rank); MPI stays for
  /// start-up, abort and barrier.
  virtual std::unique_ptr<Communicator> split(int color, int key,
                                              const std::string &name) = 0;
  /// Ends every process of the job with a non-zero status.
  [[noreturn]] virtual void terminate() = 0;

private:
  /// split() into the group of `members` (world ranks, increasing, this
  /// rank among them), which they learn for messages.
  std::unique_ptr<Communicator> splitInto(std::vector<int> members,
                                          const std::string &name);

  friend void abortJob(const std::string &message);
  int worldRank;
  int worldSize;
  std::unique_ptr<Watchdog> watchdog;
};

/// The World for this process: MPI when a launcher (mpirun, srun, ...)
/// started it; otherwise a single-process world of size 1 that needs no MPI
/// at run time, so a one-device trainer starts instantly and anywhere. The
/// environment variable BMRT_COMM=mpi|local overrides the choice
/// (BMRT_COMM=mpi without a launcher makes MPI start as a singleton).
/// Throws bmrt::Error when a World already exists.
///
/// `startTimeout` (seconds; 0: none) bounds the start itself: under MPI
/// every rank waits in MPI_Init until all have arrived, before any World
/// or its watchdog exists, so a rank stopped or lost at launch would hang
/// the others there. Past it, the process ends as the watchdog ends it.
///
/// Catch errors and call abortJob while the World is alive: its destructor
/// waits for the other ranks (MPI_Finalize), which would hang if they are
/// blocked in a collective.
std::unique_ptr<World> createWorld(double startTimeout = 0);

/// Prints "trainer: error: rank R: MESSAGE" (without "rank R: " when the job
/// has one rank) on one line, once per process, and ends the whole job with
/// a non-zero status: MPI_Abort under MPI, so that no other rank is left
/// waiting.
[[noreturn]] void abortJob(const std::string &message);
/// The program abortJob names ("trainer" unless set): a static string.
void setProgramName(const char *name);

} // namespace bmrt

#endif // BMRT_COMM_H
