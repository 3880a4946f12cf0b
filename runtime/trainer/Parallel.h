//===- Parallel.h - the trainer's parameters over the mesh ------*- C++ -*-===//
//
// What the trainer does beyond the step program when the step runs on many
// ranks: each parameter's shard (its box of the global tensor, from the
// slot's sharding), the reduction of partial-sum gradients (all-reduce, or
// under ZeRO 2 and 3 reduce-scatter over dp), the global gradient norm
// with every element counted once, and ZeRO's shards of optimizer state
// (1), gradients (2) and parameters (3) over the dp axis.
//
// A program without a mesh line is one rank's whole step of a
// data-parallel job: it runs as a mesh of dp = ranks whose gradients are
// all partial over dp, averaged rather than summed.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_PARALLEL_H
#define BMRT_TRAINER_PARALLEL_H

#include "bmrt/Collectives.h"
#include "bmrt/Executor.h"
#include "runtime/checkpoint/ShardedCheckpoint.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bmrt {

/// A further chunk of this rank (interleaved schedules) holding a copy of a
/// parameter shared by pipeline stages: its slot reads the first chunk's
/// memory (GatheredParameters), and its gradient adds into that one's sum.
struct ChunkCopy {
  int stage = 0, slot = -1;
  TensorView grad;
};

/// One trained (or frozen) parameter and what the optimizer keeps for it.
struct ParamSlot {
  std::string name;
  /// The program's slot, placed by the executor (under ZeRO 3 bound to the
  /// gathered parameters during the step only).
  int slot = -1;
  /// The trainer's stage (program) it belongs to, the pipeline rank that
  /// holds it, and whether the program computes its gradient.
  int stage = 0, ppRank = 0;
  bool trained = false;
  TensorView value;
  /// The step program's gradient slot; null data when frozen.
  TensorView grad;
  /// Micro-batch sum of gradients (only with several micro-batches); under
  /// ZeRO 2 and 3 only this rank's dp shard.
  TensorView accumulated;
  /// AdamW's first and second moments, or SGD's momentum buffer (first);
  /// under ZeRO only this rank's dp shard, flat.
  TensorView first, second;
  /// ZeRO 3: this rank's dp shard of the parameter, flat.
  TensorView shard;
  /// The same parameter in this rank's other chunks (a parameter shared
  /// by pipeline stages under an interleaved schedule).
  std::vector<ChunkCopy> copies;
  /// Gradients added to `accumulated` this step (the first starts it).
  int added = 0;

  /// Where the local tensor lies in the global one.
  Shape global, offsets;
  /// The model's shape of the parameter (Slot::model): `global` or the
  /// shape it is a factored view of.
  Shape model;
  std::vector<std::vector<std::string>> sharding;
  /// Axes the program leaves the gradient a partial sum over.
  std::vector<std::string> partial;
  /// The flat range [begin, begin + length) of the local tensor this rank
  /// updates (ZeRO: its dp shard; otherwise all of it), and the padded
  /// shard size every dp rank holds.
  int64_t begin = 0, length = 0, chunk = 0;
};

/// How a parameter's gradient is reduced when that is one collective,
/// which may then run while the backward goes on (GradientBuckets.h).
struct GradientReduction {
  /// Null: nothing to reduce, or not one collective.
  Communicator *comm = nullptr;
  /// The group's name, under which its time is logged.
  std::string group;
  /// A reduce-scatter over dp (ZeRO 2 and 3), else an all-reduce.
  bool scatter = false;
};

class Parallel;

/// Parameter slots whose memory the executors gave up
/// (Executor::releaseSlot): under ZeRO 3 the parameters live as dp shards,
/// each gathered into memory of its own before the instructions that read
/// it and freed after them; a chunk's copy of a parameter shared by
/// pipeline stages (ChunkCopy) reads the parameter's one buffer on this
/// rank (or, under ZeRO 3, is gathered from its one shard).
class GatheredParameters : public SlotProvider {
public:
  GatheredParameters(Parallel &parallel, Device &device)
      : parallel(parallel), device(device) {}
  /// Slot `slot` of `executor` reads `p` (which must outlive this).
  void add(const ParamSlot &p, const Executor &executor, int slot) {
    bySlot[{&executor, slot}] = &p;
  }
  void acquire(Executor &executor, int slot) override;
  void release(Executor &executor, int slot) override;

private:
  Parallel &parallel;
  Device &device;
  std::map<std::pair<const Executor *, int>, const ParamSlot *> bySlot;
};

class Parallel {
public:
  /// `zero` is trainer.json's ZeRO stage (0-3); communication buffers
  /// come from `device`.
  Parallel(const Program &program, World &world, int zero, Device &device);
  ~Parallel();
  Parallel(const Parallel &) = delete;
  Parallel &operator=(const Parallel &) = delete;

  Collectives &collectives() { return *comms; }
  const Mesh &mesh() const { return comms->mesh(); }
  bool hasMesh() const { return meshLine; }
  int zeroStage() const { return zero; }

  /// Fills in `p`'s shard geometry from its slots.
  void describe(ParamSlot &p, const Program &program) const;
  /// Divides the summed gradients: micro-batches, and without a mesh the
  /// data-parallel ranks (their gradients are averaged).
  double gradientDivisor(int64_t microBatches) const;

  /// Sums `p`'s gradient `g` over its partial axes but pp; under ZeRO 2
  /// and 3 leaves only this rank's dp shard, in `shardOut` (chunk
  /// elements). Every axis but pp groups ranks of one pipeline rank, which
  /// run the same schedule: this may run after any micro-batch.
  void reduceGradient(const ParamSlot &p, const TensorView &g,
                      const TensorView &shardOut, Stream &stream);
  /// Whether `p` is held by several pipeline stages (tied embeddings), its
  /// gradient a partial sum over pp.
  static bool sharedByStages(const ParamSlot &p);
  /// Sums such a `p`'s gradient `g` (as reduceGradient left it: the whole
  /// tensor, or under ZeRO 2 and 3 this rank's dp shard) over pp. The
  /// pipeline ranks reach it at different points of their schedules: call
  /// it only once the pipeline has drained, for every such parameter in
  /// the same order on every rank.
  void sumOverStages(const ParamSlot &p, const TensorView &g, Stream &stream);
  /// `p`'s reduction when reduceGradient makes it one collective that can
  /// overlap the backward: an all-reduce over its partial axes, or under
  /// ZeRO 2 and 3 a reduce-scatter over dp of a gradient partial over dp
  /// alone; none for a parameter shared by pipeline stages.
  GradientReduction singleReduction(const ParamSlot &p);
  /// The gradients' squared norm over the whole job, each element counted
  /// once (`g` is the reduced gradient this rank holds: the whole local
  /// tensor, or under ZeRO 2 and 3 its dp shard).
  /// The part of `g` this rank counts in that norm: all of it, its dp
  /// shard under ZeRO 2 and 3, or nothing (another rank holds the replica
  /// that counts).
  std::optional<TensorView> countedGradient(const ParamSlot &p,
                                            const TensorView &g) const;
  double finishSumOfSquares(double sum, Stream &stream);
  /// `sums` holds `width` numbers per parameter of `params` (this rank's
  /// part of each tensor); each becomes its sum over the ranks holding the
  /// tensor's other parts: the axes its sharding splits it over, and dp
  /// under ZeRO. Tensors split alike share one collective. (LAMB's and
  /// LARS's norms of whole tensors.)
  void sumOverShards(const std::vector<const ParamSlot *> &params,
                     std::vector<float> &sums, int width, Stream &stream);
  /// The loss of the job: summed over the program's partial axes, or
  /// without a mesh averaged over the ranks.
  double reduceLoss(double loss, const std::vector<std::string> &partial,
                    Stream &stream);
  /// ZeRO: every dp rank's updated range of `flat` (the whole local
  /// tensor) gathered back into it; from `shard` under ZeRO 3.
  void gatherOverDp(const ParamSlot &p, const TensorView &flat,
                    const TensorView &shard, Stream &stream);

  /// Returns once every rank has called it. Under the collective timeout
  /// like any collective (--timeout): the ranks waiting here while rank 0
  /// writes or loads a checkpoint end the job if that takes longer.
  void barrier();
  /// Sums `values` element-wise over every rank, in place: an int64
  /// all-reduce over the world, through device memory. A sharded save
  /// shares its folder's name and the ranks' CRCs with it, a resume the
  /// version rank 0 resolved.
  void sumOverRanks(std::vector<int64_t> &values);
  /// Every rank's shard of `p` (or of its optimizer state) written to a
  /// sharded checkpoint, for the manifest: one replica of each box, or
  /// where `flat` (ZeRO's shards) each dp rank's flat range of it.
  std::vector<TensorShard> writtenShards(const ParamSlot &p, bool flat) const;
  /// Whether this rank writes one of them.
  bool writesShard(const ParamSlot &p, bool flat) const;
  /// The mesh's axis sizes, for the manifest.
  std::map<std::string, int> meshSizes() const;

  /// The flat elements [begin, begin + length) of `t` as a 1-D view.
  static TensorView flatRange(const TensorView &t, int64_t begin,
                              int64_t length);

private:
  /// The axes reduceGradient all-reduces `p`'s gradient over (not pp;
  /// under ZeRO 2 and 3 not dp, which it reduce-scatters).
  std::vector<std::string> allReduceAxes(const ParamSlot &p) const;
  bool ownsReplica(int rank, const std::vector<std::string> &sharded) const;
  /// All ranks (null for a job of one).
  Communicator *everyone();
  void *workspace(size_t bytes);

  Device &device;
  std::unique_ptr<Collectives> comms;
  bool meshLine;
  int zero;
  int ranks;
  /// workspace(): device memory, grown as needed.
  void *buffer = nullptr;
  size_t bufferBytes = 0;
};

} // namespace bmrt

#endif // BMRT_TRAINER_PARALLEL_H
