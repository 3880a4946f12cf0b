//===- ShardTiling.cpp - shards that cover a tensor exactly once ----------===//

#include "ShardTiling.h"

#include "bmrt/Error.h"

#include <algorithm>

namespace bmrt {
namespace {

/// A box of the global tensor: its offsets and shape.
using Box = std::pair<Shape, Shape>;

std::string describe(const TensorShard &s) {
  std::string text = "rank " + std::to_string(s.rank) + "'s box at " +
                     formatShape(s.offsets) + " of shape " +
                     formatShape(s.shape);
  if (s.flat())
    text += " (flat range [" + std::to_string(s.flatBegin) + ", " +
            std::to_string(s.flatEnd) + "))";
  return text;
}

void checkInside(const std::string &where, const ShardedTensor &t,
                 const TensorShard &s) {
  size_t rank = t.global.size();
  bool inside = s.offsets.size() == rank && s.shape.size() == rank;
  for (size_t d = 0; inside && d < rank; ++d)
    inside = s.offsets[d] >= 0 && s.shape[d] >= 0 &&
             s.offsets[d] <= t.global[d] - s.shape[d];
  BMRT_CHECK(inside, where + ": " + describe(s) + " of '" + t.name +
                         "' lies outside its shape " + formatShape(t.global));
}

/// The flat ranges of one box are disjoint and cover it; a box held whole
/// is held once.
void checkBox(const std::string &where, const ShardedTensor &t, const Box &box,
              std::vector<const TensorShard *> shards) {
  auto whole = std::find_if(shards.begin(), shards.end(),
                            [](const TensorShard *s) { return !s->flat(); });
  if (whole != shards.end()) {
    const TensorShard *other = shards[whole == shards.begin() ? 1 : 0];
    BMRT_CHECK(shards.size() == 1, where + ": " + describe(**whole) + " and " +
                                       describe(*other) + " of '" + t.name +
                                       "' overlap");
    return;
  }
  std::sort(shards.begin(), shards.end(),
            [](const TensorShard *a, const TensorShard *b) {
              return a->flatBegin < b->flatBegin;
            });
  int64_t covered = 0;
  const TensorShard *last = nullptr;
  for (const TensorShard *s : shards) {
    if (s->flatBegin == s->flatEnd)
      continue;
    BMRT_CHECK(s->flatBegin >= covered, where + ": " + describe(*last) +
                                            " and " + describe(*s) + " of '" +
                                            t.name + "' overlap");
    BMRT_CHECK(s->flatBegin == covered,
               where + ": elements [" + std::to_string(covered) + ", " +
                   std::to_string(s->flatBegin) + ") of the box at " +
                   formatShape(box.first) + " of '" + t.name +
                   "' are in no shard");
    covered = s->flatEnd;
    last = s;
  }
  BMRT_CHECK(covered == numElements(box.second),
             where + ": elements [" + std::to_string(covered) + ", " +
                 std::to_string(numElements(box.second)) + ") of the box at " +
                 formatShape(box.first) + " of '" + t.name +
                 "' are in no shard");
}

bool intersect(const Box &a, const Box &b) {
  if (numElements(a.second) == 0 || numElements(b.second) == 0)
    return false;
  for (size_t d = 0; d < a.first.size(); ++d)
    if (a.first[d] >= b.first[d] + b.second[d] ||
        b.first[d] >= a.first[d] + a.second[d])
      return false;
  return true;
}

} // namespace

void checkTiling(const std::string &where, const ShardedTensor &t) {
  std::map<Box, std::vector<const TensorShard *>> boxes;
  for (const TensorShard &s : t.shards) {
    checkInside(where, t, s);
    boxes[{s.offsets, s.shape}].push_back(&s);
  }
  int64_t volume = 0;
  for (const auto &[box, shards] : boxes) {
    checkBox(where, t, box, shards);
    volume += numElements(box.second);
  }
  // Pairwise: a tensor has as many boxes as ranks split it (tp x ep, not
  // dp or pp), tens at most, so this costs nothing next to the reads.
  for (auto a = boxes.begin(); a != boxes.end(); ++a)
    for (auto b = std::next(a); b != boxes.end(); ++b)
      BMRT_CHECK(!intersect(a->first, b->first),
                 where + ": " + describe(*a->second.front()) + " and " +
                     describe(*b->second.front()) + " of '" + t.name +
                     "' overlap");
  BMRT_CHECK(volume == numElements(t.global),
             where + ": the shards of '" + t.name + "' cover " +
                 std::to_string(volume) + " of its " +
                 std::to_string(numElements(t.global)) + " elements");
}

} // namespace bmrt
