//===- Sharding.h - which part of a global tensor a rank holds --*- C++ -*-===//
//
// A step program partitioned over a mesh gives every slot its local shape
// and its sharding (Program.h): per dim, the mesh axes splitting it, major
// to minor. From these follow the global shape and the box of the global
// tensor each rank holds; the trainer slices parameters and batches with
// them and checkpoints record them.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_SHARDING_H
#define BMRT_SHARDING_H

#include "bmrt/Box.h"
#include "bmrt/Mesh.h"
#include "bmrt/Program.h"

#include <cstddef>
#include <string>
#include <vector>

namespace bmrt {

/// The mesh of the program's `mesh` line (Mesh::fromPlan); for a program
/// without one, a mesh of `ranks` data-parallel ranks.
Mesh meshOf(const Program &program, int ranks = 1);

/// The classes of the program's loss (a language model's vocabulary), or 0
/// when the model brings its own loss: the logits' last dim, times the
/// ranks they are split over under the vocabulary-parallel loss.
int64_t lossClasses(const Program &program);

/// The ids an integer slot may hold are below this: below `classes` where
/// positive (a vocabulary, the loss's classes) and below the size of every
/// axis the program gathers or scatters along with them, directly or
/// through views and copies; 2 when nothing bounds them (a mask or a type
/// id). The trainer's feeder and the step timer draw inputs with
/// it.
int64_t idBound(const Program &program, int slot, int64_t classes);

/// "dp,tp" -> {"dp", "tp"}; an empty name (",,") is kept, for the verifier
/// to refuse.
std::vector<std::string> splitAxes(const std::string &axes);

/// The ranks in `rank`'s group along `axes`: the product of their sizes.
int groupSize(const Mesh &mesh, const std::vector<std::string> &axes);
/// The chunk `rank` holds along `axes`: the mixed-radix number of its
/// coordinates, the first listed axis the most significant.
int chunkIndex(const Mesh &mesh, int rank,
               const std::vector<std::string> &axes);
/// For each member of `rank`'s group along `axes`, in group-rank order
/// (Mesh::groupRanks), the chunk it holds: where the listed order and the
/// communicator's order differ.
std::vector<int> chunkOrder(const Mesh &mesh, int rank,
                            const std::vector<std::string> &axes);

/// The global shape of a slot of `local` shape under `sharding`.
Shape globalShape(const Shape &local,
                  const std::vector<std::vector<std::string>> &sharding,
                  const Mesh &mesh);
/// Where `rank`'s block starts in the global tensor, per dim.
Shape shardOffsets(const Shape &local,
                   const std::vector<std::vector<std::string>> &sharding,
                   const Mesh &mesh, int rank);

/// A table split along its gather axis over ranks (the vocabulary-parallel
/// embedding): this rank holds entries [first, first + local) of `total`.
/// Indices index all `total` entries; those this rank does not hold gather
/// zeros (and add nothing to the gradient). The default is the whole table.
struct TableShard {
  int64_t first = 0;
  int64_t total = -1;
};

} // namespace bmrt

#endif // BMRT_SHARDING_H
