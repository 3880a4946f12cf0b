//===- Sharding.cpp - which part of a global tensor a rank holds ----------===//

#include "bmrt/Sharding.h"
#include "bmrt/Error.h"

#include <algorithm>
#include <cstdint>

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

namespace {

/// Ops that pass an index through unchanged in value (views, copies, a
/// where's branches: the importer's wrap of negative indices) and the
/// operands that carry it.
bool passesIndexThrough(const Instr &instr, size_t operand) {
  static const char *const kViews[] = {
      "cast", "copy", "expand", "reshape", "slice", "squeeze", "unsqueeze"};
  if (instr.op == "where")
    return operand > 0;
  return operand == 0 && std::find(std::begin(kViews), std::end(kViews),
                                   instr.op) != std::end(kViews);
}

/// Ops that index a data tensor's `axis` with operand 1.
bool indexesAlongAxis(const Instr &instr) {
  return instr.op == "gather" || instr.op == "gather_elements" ||
         instr.op == "scatter_elements";
}

} // namespace

int64_t idBound(const Program &program, int slot, int64_t classes) {
  int64_t bound = classes > 0 ? classes : INT64_MAX;
  // The slot and what carries its values on, in program order.
  std::vector<bool> carries(program.slots.size(), false);
  carries[slot] = true;
  for (const Instr &instr : program.instrs)
    for (size_t k = 0; k < instr.operands.size(); ++k) {
      if (!carries[instr.operands[k]])
        continue;
      if (k == 1 && indexesAlongAxis(instr))
        bound = std::min(
            bound,
            program.slots[instr.operands[0]].shape[instr.getInt("axis")]);
      if (passesIndexThrough(instr, k))
        for (int result : instr.results)
          carries[result] = true;
    }
  return bound == INT64_MAX ? 2 : bound;
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

} // namespace bmrt
