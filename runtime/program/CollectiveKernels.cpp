//===- CollectiveKernels.cpp - a step program's collectives ---------------===//
//
// all_reduce, all_gather, reduce_scatter, all_to_all and shard_slice over
// the group of the instruction's `axes`, and the vocabulary-parallel loss's
// kernels, which need to know the classes this rank holds. Communicators (NCCL's contract)
// move flat buffers of whole chunks in group-rank order; the program's
// chunks lie along any dim, in the order its axes are listed. Where the
// two differ, chunks are packed into (or unpacked from) the executor's
// scratch buffer around the flat call.
//
//===----------------------------------------------------------------------===//

#include "CollectiveKernels.h"

#include "bmrt/Collectives.h"
#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <chrono>

namespace bmrt {
namespace {

using E = Executor;

/// A tensor seen as [outer, rows, inner] around one dim, in elements.
using Slabs = AxisSplit;

Slabs around(const Shape &shape, int64_t dim) { return splitAt(shape, dim); }

/// Copies chunk `from` of `src` to chunk `to` of `dst` in device memory, a
/// chunk being `rows` rows of the middle dim.
void moveChunk(E &e, const void *src, const Slabs &s, int64_t from, void *dst,
               const Slabs &d, int64_t to, int64_t rows, DType type) {
  e.device().copyBox(src, {s.outer, s.dim, s.inner}, {0, from * rows, 0}, dst,
                     {d.outer, d.dim, d.inner}, {0, to * rows, 0},
                     {s.outer, rows, s.inner}, sizeOf(type), e.stream());
}

/// Everything a collective instruction needs to know of its group.
struct Group {
  Collectives &collectives;
  Communicator *comm; // null: this rank alone
  std::string name;
  /// Per group rank, the chunk it holds in the instruction's listed order.
  std::vector<int> order;
  int size;

  Group(E &e, const Instr &i)
      : collectives(e.collectives(i.op)),
        comm(collectives.group(splitAxes(i.getString("axes")))),
        name(collectives.groupName(splitAxes(i.getString("axes")))),
        order(chunkOrder(collectives.mesh(), collectives.rank(),
                         splitAxes(i.getString("axes")))),
        size(static_cast<int>(order.size())) {}

  bool inGroupRankOrder() const {
    for (int j = 0; j < size; ++j)
      if (order[j] != j)
        return false;
    return true;
  }
  /// Runs `transfer` (the flat collective) and records its time; without a
  /// communicator, copies `bytes` from `send` to `recv` instead.
  template <typename F>
  void run(E &e, const void *send, void *recv, size_t bytes, F transfer) {
    e.stream().synchronize();
    if (!comm) {
      if (send != recv)
        e.device().copyOnDevice(recv, send, bytes, e.stream());
      return;
    }
    auto begin = std::chrono::steady_clock::now();
    transfer(*comm);
    e.stream().synchronize();
    collectives.addTime(name, std::chrono::duration<double>(
                                  std::chrono::steady_clock::now() - begin)
                                  .count());
  }
};

} // namespace

void launchAllReduce(E &e, const Instr &i) {
  Group g(e, i);
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  g.run(e, x.data, y.data, x.bytes(), [&](Communicator &c) {
    c.allReduce(x.data, y.data, x.size(), x.dtype, e.stream());
  });
}

void launchAllGather(E &e, const Instr &i) {
  Group g(e, i);
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  int64_t dim = i.getInt("dim");
  Slabs in = around(x.shape, dim), out = around(y.shape, dim);
  bool direct = in.outer == 1 && g.inGroupRankOrder();
  void *gathered = direct ? y.data : e.scratch(y.bytes());
  g.run(e, x.data, gathered, x.bytes(), [&](Communicator &c) {
    c.allGather(x.data, gathered, x.size(), x.dtype, e.stream());
  });
  if (direct)
    return;
  // Group rank j's block, shaped like x, goes to chunk order[j] of y.
  for (int j = 0; j < g.size; ++j)
    moveChunk(e, static_cast<char *>(gathered) + j * x.bytes(), in, 0, y.data,
              out, g.order[j], in.dim, x.dtype);
}

void launchReduceScatter(E &e, const Instr &i) {
  Group g(e, i);
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  int64_t dim = i.getInt("dim");
  Slabs in = around(x.shape, dim), out = around(y.shape, dim);
  const void *send = x.data;
  if (!(in.outer == 1 && g.inGroupRankOrder())) {
    // Chunk order[j] of x becomes block j of the flat send buffer.
    void *packed = e.scratch(x.bytes());
    for (int j = 0; j < g.size; ++j)
      moveChunk(e, x.data, in, g.order[j],
                static_cast<char *>(packed) + j * y.bytes(), out, 0, out.dim,
                x.dtype);
    send = packed;
  }
  g.run(e, send, y.data, y.bytes(), [&](Communicator &c) {
    c.reduceScatter(send, y.data, y.size(), x.dtype, e.stream());
  });
}

void launchAllToAll(E &e, const Instr &i) {
  Group g(e, i);
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  int64_t split = i.getInt("split_dim"), concat = i.getInt("concat_dim");
  Shape chunkShape = x.shape;
  chunkShape[split] /= g.size;
  size_t chunkBytes = x.bytes() / g.size;
  char *send = static_cast<char *>(e.scratch(2 * x.bytes()));
  char *recv = send + x.bytes();
  // Block j of the send buffer is chunk order[j] along split_dim; block j
  // received (from group rank j) is chunk order[j] along concat_dim.
  Slabs in = around(x.shape, split), piece = around(chunkShape, split);
  for (int j = 0; j < g.size; ++j)
    moveChunk(e, x.data, in, g.order[j], send + j * chunkBytes, piece, 0,
              piece.dim, x.dtype);
  g.run(e, send, recv, x.bytes(), [&](Communicator &c) {
    c.allToAll(send, recv, numElements(chunkShape), x.dtype, e.stream());
  });
  Slabs part = around(chunkShape, concat), out = around(y.shape, concat);
  for (int j = 0; j < g.size; ++j)
    moveChunk(e, recv + j * chunkBytes, part, 0, y.data, out, g.order[j],
              part.dim, x.dtype);
}

ClassSplit classSplitOf(E &e, const Instr &i) {
  Collectives &c = e.collectives(i.op);
  std::vector<std::string> axes = splitAxes(i.getString("axes"));
  int64_t local = e.operand(i, 0).shape.back();
  return {local * groupSize(c.mesh(), axes),
          local * chunkIndex(c.mesh(), c.rank(), axes)};
}

TableShard tableShardOf(E &e, const Instr &i) {
  Collectives &c = e.collectives(i.op);
  std::vector<std::string> axes = splitAxes(i.getString("axes"));
  int64_t local = e.operand(i, 0).shape[i.getInt("axis")];
  return {local * chunkIndex(c.mesh(), c.rank(), axes),
          local * groupSize(c.mesh(), axes)};
}

void launchShardSlice(E &e, const Instr &i) {
  Collectives &c = e.collectives(i.op);
  const TensorView &x = e.operand(i, 0), &y = e.result(i, 0);
  int64_t dim = i.getInt("dim");
  Slabs in = around(x.shape, dim), out = around(y.shape, dim);
  moveChunk(e, x.data, in, chunkIndex(c.mesh(), c.rank(),
                                   splitAxes(i.getString("axes"))),
            y.data, out, 0, out.dim, x.dtype);
}

} // namespace bmrt
