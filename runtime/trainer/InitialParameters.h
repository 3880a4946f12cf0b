//===- InitialParameters.h - a folder's step-0 weights ---------*- C++ -*-===//
//
// A compiled folder holds its step-0 parameters either as values
// (params.safetensors: the model's initializers, or --init random's
// draws) or as specs to generate at load time (init.json, from `bmc
// compile --init random --weights-at-load`). trainer.json names one of
// them ("parameters" or "init"). The trainer and bmrt-forward read each
// rank's box of a parameter through this one interface, so both sources
// are checked against the program alike and give the same bits.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_INITIALPARAMETERS_H
#define BMRT_TRAINER_INITIALPARAMETERS_H

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Init.h"

#include <optional>
#include <string>
#include <vector>

namespace bmrt {

class InitialParameters {
public:
  /// Values from the safetensors file at `parametersPath`, or, when it is
  /// empty, specs from the init.json at `initPath`.
  InitialParameters(const std::string &parametersPath,
                    const std::string &initPath);

  /// What DIR/trainer.json names; DIR/params.safetensors without one.
  static InitialParameters ofFolder(const std::string &dir);

  /// Writes to `out` (host, row-major, `box` elements of `global`'s
  /// dtype) the box at `offsets` of parameter `name`, whose global tensor
  /// the program sees as `global` (dtype and shape; data unused). As
  /// requireTensor, a stored shape that is a view of both `global` and
  /// `model` with the same element order is that parameter too. Throws one
  /// line naming the file and the tensor when it is absent or of another
  /// dtype or shape.
  void readBox(const std::string &name, const TensorView &global,
               const Shape &model, const Shape &offsets, const Shape &box,
               void *out) const;

  /// Whether the values are generated at load time.
  bool generated() const { return plan.has_value(); }

private:
  /// The file, quoted, for messages.
  std::string where;
  std::vector<HostTensor> tensors;
  std::optional<InitPlan> plan;
};

} // namespace bmrt

#endif // BMRT_TRAINER_INITIALPARAMETERS_H
