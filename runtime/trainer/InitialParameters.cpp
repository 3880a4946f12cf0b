//===- InitialParameters.cpp - a folder's step-0 weights -----------------===//

#include "InitialParameters.h"

#include "bmrt/Box.h"
#include "bmrt/Error.h"

#include <nlohmann/json.hpp>

#include <fstream>

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
  std::string path = dir + "/trainer.json";
  std::ifstream in(path);
  if (!in)
    return InitialParameters(dir + "/params.safetensors", "");
  nlohmann::json j = nlohmann::json::parse(in, nullptr,
                                           /*allow_exceptions=*/false);
  BMRT_CHECK(!j.is_discarded() && j.is_object(),
             "'" + path + "' is not valid JSON");
  auto file = [&](const char *key) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null())
      return std::string();
    BMRT_CHECK(it->is_string(), "'" + path + "': \"" + key +
                                    "\" must name a file in the folder");
    return dir + "/" + it->get<std::string>();
  };
  std::string parameters = file("parameters"), init = file("init");
  BMRT_CHECK(parameters.empty() != init.empty(),
             "'" + path + "' must name either \"parameters\" or \"init\"");
  return InitialParameters(parameters, init);
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
