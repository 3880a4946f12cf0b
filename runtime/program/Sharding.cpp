//===- Sharding.cpp - which part of a global tensor a rank holds ----------===//

#include "bmrt/Sharding.h"
#include "bmrt/Error.h"
#include "runtime/cpu/Broadcast.h"

#include <cstring>

namespace bmrt {

Mesh meshOf(const Program &program, int ranks) {
  std::map<std::string, int> sizes;
  for (const MeshAxis &axis : program.mesh)
    sizes[axis.name] = axis.size;
  if (program.mesh.empty())
    sizes["dp"] = ranks;
  return Mesh::fromPlan(sizes);
}

int64_t lossClasses(const Program &program) {
  for (const Instr &instr : program.instrs) {
    if (instr.op == "cross_entropy")
      return program.slots[instr.operands[0]].shape.back();
    if (instr.op == "cross_entropy_stats")
      return program.slots[instr.operands[0]].shape.back() *
             groupSize(meshOf(program), splitAxes(instr.getString("axes")));
  }
  return 0;
}

std::vector<std::string> splitAxes(const std::string &axes) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    size_t comma = axes.find(',', start);
    names.push_back(axes.substr(start, comma - start));
    if (comma == std::string::npos)
      return names;
    start = comma + 1;
  }
}

int groupSize(const Mesh &mesh, const std::vector<std::string> &axes) {
  int size = 1;
  for (const std::string &axis : axes)
    size *= mesh.axisSize(axis);
  return size;
}

int chunkIndex(const Mesh &mesh, int rank,
               const std::vector<std::string> &axes) {
  int index = 0;
  for (const std::string &axis : axes)
    index = index * mesh.axisSize(axis) + mesh.coordinate(rank, axis);
  return index;
}

std::vector<int> chunkOrder(const Mesh &mesh, int rank,
                            const std::vector<std::string> &axes) {
  std::vector<int> order;
  for (int member : mesh.groupRanks(rank, axes))
    order.push_back(chunkIndex(mesh, member, axes));
  return order;
}

Shape globalShape(const Shape &local,
                  const std::vector<std::vector<std::string>> &sharding,
                  const Mesh &mesh) {
  Shape global = local;
  for (size_t d = 0; d < sharding.size() && d < global.size(); ++d)
    global[d] *= groupSize(mesh, sharding[d]);
  return global;
}

Shape shardOffsets(const Shape &local,
                   const std::vector<std::vector<std::string>> &sharding,
                   const Mesh &mesh, int rank) {
  Shape offsets(local.size(), 0);
  for (size_t d = 0; d < sharding.size() && d < local.size(); ++d)
    offsets[d] = local[d] * chunkIndex(mesh, rank, sharding[d]);
  return offsets;
}

void copyBox(const void *src, const Shape &srcShape, const Shape &srcOffsets,
             void *dst, const Shape &dstShape, const Shape &dstOffsets,
             const Shape &box, size_t elementBytes) {
  size_t rank = box.size();
  BMRT_CHECK(srcShape.size() == rank && dstShape.size() == rank &&
                 srcOffsets.size() == rank && dstOffsets.size() == rank,
             "a box copy between tensors of different ranks");
  for (size_t d = 0; d < rank; ++d)
    BMRT_CHECK(srcOffsets[d] >= 0 && dstOffsets[d] >= 0 &&
                   srcOffsets[d] + box[d] <= srcShape[d] &&
                   dstOffsets[d] + box[d] <= dstShape[d],
               "a box of " + formatShape(box) + " does not fit " +
                   formatShape(srcShape) + " at " + formatShape(srcOffsets) +
                   " and " + formatShape(dstShape) + " at " +
                   formatShape(dstOffsets));
  if (numElements(box) == 0)
    return;
  // The innermost dim is one contiguous run; count through the others.
  Shape srcStrides = cpu::detail::contiguousStrides(srcShape),
        dstStrides = cpu::detail::contiguousStrides(dstShape);
  size_t runBytes = (rank ? box[rank - 1] : 1) * elementBytes;
  Shape index(rank, 0);
  const char *from = static_cast<const char *>(src);
  char *to = static_cast<char *>(dst);
  while (true) {
    int64_t s = 0, t = 0;
    for (size_t d = 0; d < rank; ++d) {
      s += (srcOffsets[d] + index[d]) * srcStrides[d];
      t += (dstOffsets[d] + index[d]) * dstStrides[d];
    }
    std::memcpy(to + t * elementBytes, from + s * elementBytes, runBytes);
    size_t d = rank > 0 ? rank - 1 : 0;
    while (d-- > 0) {
      if (++index[d] < box[d])
        break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1))
      return;
  }
}

} // namespace bmrt
