//===- InitialParameters.cpp - a folder's step-0 weights -----------------===//

#include "InitialParameters.h"
#include "TrainerJson.h"

#include "bmrt/Box.h"
#include "bmrt/Error.h"

namespace bmrt {

InitialParameters::InitialParameters(const std::string &parametersPath,
                                     const std::string &initPath) {
  if (!parametersPath.empty()) {
    where = "'" + parametersPath + "'";
    tensors = readSafetensors(parametersPath).tensors;
  } else {
    where = "'" + initPath + "'";
    plan = readInitPlan(initPath);
  }
}

InitialParameters InitialParameters::ofFolder(const std::string &dir) {
  StepZeroFiles files = readStepZeroFiles(dir);
  return InitialParameters(files.parameters, files.init);
}

void InitialParameters::readBox(const std::string &name,
                                const TensorView &global, const Shape &model,
                                const Shape &offsets, const Shape &box,
                                void *out) const {
  if (!plan) {
    const HostTensor &found =
        requireTensor(tensors, name, global, where, model);
    copyBox(found.data.data(), global.shape, offsets, out, box,
            Shape(box.size(), 0), box, sizeOf(global.dtype));
    return;
  }
  const InitSpec *spec = findInitSpec(*plan, name);
  BMRT_CHECK(spec, where + " has no tensor '" + name + "'");
  bool shaped =
      spec->shape == global.shape ||
      (!model.empty() && sameElementOrder(spec->shape, global.shape) &&
       sameElementOrder(spec->shape, model));
  BMRT_CHECK(spec->dtype == global.dtype && shaped,
             where + ": '" + name + "' is " + nameOf(spec->dtype) +
                 formatShape(spec->shape) + ", the program needs " +
                 nameOf(global.dtype) + formatShape(global.shape));
  fillInitBox(*spec, plan->seed, global.shape, offsets, box, out);
}

} // namespace bmrt
