//===- Mesh.h - how the ranks of a job lie on the device mesh ---*- C++ -*-===//
//
// The plan's device mesh (tp, tp2, cp, ep, dp, pp) and the coordinates of each
// rank on it: what the step program's shardings and collectives refer to, and
// what the communicators of Comm.h group ranks by.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_MESH_H
#define BMRT_MESH_H

#include <map>
#include <string>
#include <vector>

namespace bmrt {

/// One axis of the device mesh: its name in `bm.mesh` and `#bm.sharding`
/// ("dp", "tp", ...) and its size.
struct MeshAxis {
  std::string name;
  int size = 1;
};

/// The axes of bmc's plans, innermost first: Megatron-Core's order
/// tp-cp-ep-dp-pp, with 2-D tensor parallelism's second axis (tp2, the
/// rows of the tp x tp2 grid) right after tp so that one grid's ranks are
/// consecutive. Every partitioned program has tp, ep, dp and pp (size 1
/// where the plan does not split); tp2 and cp only where the plan uses
/// them, so that other programs' meshes read as before.
inline constexpr const char *kMeshAxes[] = {"tp", "tp2", "cp",
                                            "ep", "dp",  "pp"};
inline bool isOptionalAxis(const std::string &axis) {
  return axis == "cp" || axis == "tp2";
}

/// How the ranks of a job lie on the device mesh. A rank's coordinates are
/// its mixed-radix digits, the first axis innermost (stride 1).
class Mesh {
public:
  /// Axes innermost first. Throws bmrt::Error on a size below 1 or a
  /// repeated name.
  explicit Mesh(std::vector<MeshAxis> axesInnermostFirst);

  /// bmc's layout (kMeshAxes): every rank is numbered tp innermost, then
  /// tp2, cp, ep, dp, pp. `sizes` are those of the step program's `bm.mesh`
  /// (with expert parallelism its "dp" is the plan's dp / ep); axes it
  /// leaves out have size 1, so tp, ep, dp and pp always exist. Throws on
  /// another axis name.
  static Mesh fromPlan(const std::map<std::string, int> &sizes);

  const std::vector<MeshAxis> &axes() const { return meshAxes; }
  int numRanks() const;
  /// Position of `axis` in axes(); throws bmrt::Error for an unknown name.
  int axisIndex(const std::string &axis) const;
  int axisSize(const std::string &axis) const;

  /// Coordinate of `rank` along each axis, in axes() order.
  std::vector<int> coordinates(int rank) const;
  int coordinate(int rank, const std::string &axis) const;
  int rankAt(const std::vector<int> &coordinates) const;

  /// The ranks that differ from `rank` only along `axes`: its group along
  /// them. Listed in group-rank order, which follows the mesh (innermost
  /// axis fastest) whatever order `axes` names them in.
  std::vector<int> groupRanks(int rank,
                              const std::vector<std::string> &axes) const;

  /// "tp=2,ep=1,dp=2,pp=2".
  std::string str() const;

private:
  std::vector<MeshAxis> meshAxes;
};

} // namespace bmrt

#endif // BMRT_MESH_H
