//===- CollectiveRates.cpp - the communicator's collectives by size -------===//
//
// nccl-tests' definitions (doc/PERFORMANCE.md): the size of an operation is
// the all-reduce buffer, the all-gather output, the reduce-scatter input,
// the all-to-all per-rank buffer and the point-to-point message; algbw =
// size / time; busbw = algbw * factor, the factor making busbw comparable
// with the link's bandwidth whatever the group size. fp32 data, as the
// trainer's gradients and activations are.
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"

#include "bmrt/Format.h"

#include <algorithm>

namespace bmrt::calibrate {
namespace {

enum class Kind { AllGather, AllReduce, AllToAll, ReduceScatter, SendRecv };

/// One collective: its name, the bus-bandwidth factor for n ranks, and
/// whether a call's count is per rank (a size of `floats` elements then
/// runs floats / n per rank, rounded down to whole elements).
struct Collective {
  Kind kind;
  const char *name;
  double (*factor)(int n);
  bool perRank;
};

double allReduceFactor(int n) { return 2.0 * (n - 1) / n; }
double shareFactor(int n) { return double(n - 1) / n; }
double pointToPointFactor(int) { return 1.0; }

/// Alphabetical.
const Collective kCollectives[] = {
    {Kind::AllGather, "all_gather", shareFactor, true},
    {Kind::AllReduce, "all_reduce", allReduceFactor, false},
    {Kind::AllToAll, "all_to_all", shareFactor, true},
    {Kind::ReduceScatter, "reduce_scatter", shareFactor, true},
    {Kind::SendRecv, "send_recv", pointToPointFactor, false},
};

/// Ping-pong between ranks 0 and 1; the others wait at the barrier. Two
/// one-way messages per call.
void pingPong(Communicator &comm, float *send, float *recv, int64_t count,
              Stream &stream) {
  if (comm.rank() == 0) {
    comm.send(send, count, DType::F32, 1, stream);
    comm.recv(recv, count, DType::F32, 1, stream);
  } else if (comm.rank() == 1) {
    comm.recv(recv, count, DType::F32, 0, stream);
    comm.send(send, count, DType::F32, 0, stream);
  }
}

void call(Kind kind, Communicator &comm, float *send, float *recv,
          int64_t count, Stream &stream) {
  switch (kind) {
  case Kind::AllGather:
    return comm.allGather(send, recv, count, DType::F32, stream);
  case Kind::AllReduce:
    return comm.allReduce(send, recv, count, DType::F32, stream);
  case Kind::AllToAll:
    return comm.allToAll(send, recv, count, DType::F32, stream);
  case Kind::ReduceScatter:
    return comm.reduceScatter(send, recv, count, DType::F32, stream);
  case Kind::SendRecv:
    return pingPong(comm, send, recv, count, stream);
  }
}

/// Sizes in bytes: powers of 4 from 4 up to maxBytes.
std::vector<int64_t> sizesUpTo(int64_t maxBytes) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = 4; bytes <= maxBytes; bytes *= 4)
    sizes.push_back(bytes);
  return sizes;
}

void measureCollective(Bench &bench, const Collective &collective,
                       Buffer &send, Buffer &recv,
                       nlohmann::ordered_json &entries) {
  Communicator &comm = bench.world();
  int n = comm.size();
  int64_t previous = 0;
  for (int64_t bytes : sizesUpTo(bench.options().maxBytes)) {
    int64_t count = collective.perRank ? bytes / 4 / n : bytes / 4;
    int64_t size = 4 * (collective.perRank ? count * n : count);
    // Below one element per rank, or the same size as the last one after
    // rounding down to whole elements: nothing new to measure.
    if (count == 0 || size <= previous)
      continue;
    previous = size;
    Timing timing = bench.measure([&] {
      call(collective.kind, comm, send.data(), recv.data(), count,
           bench.stream());
    });
    double seconds = timing.seconds;
    if (collective.kind == Kind::SendRecv)
      seconds /= 2;
    double algbw = double(size) / seconds;
    double busbw = algbw * collective.factor(n);
    entries.push_back({{"kind", collective.name},
                       {"ranks", n},
                       {"bytes", size},
                       {"seconds", seconds},
                       {"algbw_bytes_per_second", algbw},
                       {"busbw_bytes_per_second", busbw},
                       {"spread", timing.spread}});
    bench.progress(std::string(collective.name) + " " + std::to_string(n) +
                   " ranks " +
                   formatBytes(double(size), BytesDigits::Shortest) +
                   ": busbw " + formatRate(busbw, "B"));
  }
}

} // namespace

void measureCollectives(Bench &bench, nlohmann::ordered_json &out) {
  // Every operation's buffers fit in maxBytes (rounded up to elements).
  int64_t floats = (bench.options().maxBytes + 3) / 4;
  Buffer send(bench.device(), floats), recv(bench.device(), floats);
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const Collective &collective : kCollectives)
    measureCollective(bench, collective, send, recv, entries);
  out["collectives"] = std::move(entries);
}

} // namespace bmrt::calibrate
