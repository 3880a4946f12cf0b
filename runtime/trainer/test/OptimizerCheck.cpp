//===- OptimizerCheck.cpp - runs the trainer's update on given gradients --===//
//
// bmrt-optimizer-check IN OUT: the helper tests/runtime/test_optimizer.py
// compares with its numpy reference. IN is a safetensors file holding
// "param.<name>" (the initial parameters) and "grad.<step>.<name>" for
// steps 1..N, with the hyperparameters as "__metadata__" strings
// (optimizer adamw|sgd|lamb|lars, lr, min_lr, warmup, steps, clip, beta1,
// beta2, epsilon, weight_decay, momentum, trust_coefficient). It runs N
// steps exactly as the trainer does on one device (global norm, clipping
// factor, scheduled learning rate, the update kernels; LAMB and LARS
// through LayerwiseUpdate, as the trainer) and writes OUT: "param.<name>",
// the optimizer state ("exp_avg.<name>", "exp_avg_sq.<name>" or
// "momentum_buffer.<name>") and, per step, "lr" and "grad_norm" as F32 [N]
// tensors.
//
// Both files go through the Python side's own safetensors code, so the
// test also checks the format against an independent reader and writer.
//
//===----------------------------------------------------------------------===//

#include "LayerwiseUpdate.h"
#include "LrSchedule.h"

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Backend.h"
#include "bmrt/Device.h"
#include "bmrt/Error.h"
#include "runtime/cpu/Kernels.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

using namespace bmrt;

namespace {

struct Options {
  OptimizerKind optimizer = OptimizerKind::AdamW;
  AdamWConfig adamw;
  SgdConfig sgd;
  LambConfig lamb;
  LarsConfig lars;
  LrSchedule schedule;
  double clip = 0;
  int64_t steps = 0;
};

double number(const SafetensorsMetadata &m, const std::string &key) {
  auto it = m.find(key);
  BMRT_CHECK(it != m.end(), "the input has no metadata '" + key + "'");
  return std::stod(it->second);
}

Options readOptions(const SafetensorsMetadata &m) {
  Options o;
  auto it = m.find("optimizer");
  BMRT_CHECK(it != m.end() && parseOptimizer(it->second, o.optimizer),
             "the input's metadata 'optimizer' must be adamw, sgd, lamb or "
             "lars");
  o.steps = int64_t(number(m, "steps"));
  o.clip = number(m, "clip");
  o.schedule = LrSchedule(float(number(m, "lr")), int64_t(number(m, "warmup")),
                          o.steps, float(number(m, "min_lr")));
  o.adamw.beta1 = float(number(m, "beta1"));
  o.adamw.beta2 = float(number(m, "beta2"));
  o.adamw.epsilon = float(number(m, "epsilon"));
  o.adamw.weightDecay = float(number(m, "weight_decay"));
  o.sgd.momentum = float(number(m, "momentum"));
  o.sgd.weightDecay = float(number(m, "weight_decay"));
  o.lamb = {o.adamw.beta1, o.adamw.beta2, o.adamw.epsilon, o.adamw.weightDecay};
  o.lars.momentum = o.sgd.momentum;
  o.lars.weightDecay = o.sgd.weightDecay;
  if (o.optimizer == OptimizerKind::Lars)
    o.lars.trustCoefficient = float(number(m, "trust_coefficient"));
  return o;
}

/// A parameter with its optimizer state, in host memory (the CPU device's
/// memory is host memory).
struct Slot {
  std::string name;
  HostTensor value, first, second;
};

TensorView viewOf(HostTensor &t) { return {t.data.data(), t.dtype, t.shape}; }

HostTensor zerosLike(const HostTensor &t, const std::string &name) {
  HostTensor z{name, t.dtype, t.shape, {}};
  z.data.assign(t.data.size(), 0);
  return z;
}

std::vector<Slot> readParams(const SafetensorsFile &in,
                             OptimizerKind optimizer) {
  std::vector<Slot> slots;
  for (const HostTensor &t : in.tensors) {
    if (t.name.rfind("param.", 0) != 0)
      continue;
    BMRT_CHECK(t.dtype == DType::F32, "'" + t.name + "' is not F32");
    Slot s;
    s.name = t.name.substr(6);
    s.value = t;
    s.first = zerosLike(
        t, (hasSecondMoment(optimizer) ? "exp_avg." : "momentum_buffer.") +
               s.name);
    s.second = zerosLike(t, "exp_avg_sq." + s.name);
    slots.push_back(std::move(s));
  }
  return slots;
}

const HostTensor &gradOf(const SafetensorsFile &in, int64_t step,
                         const Slot &s) {
  std::string name = "grad." + std::to_string(step) + "." + s.name;
  const HostTensor *g = findTensor(in.tensors, name);
  BMRT_CHECK(g && g->shape == s.value.shape, "the input has no gradient '" +
                                                 name +
                                                 "' of the parameter's shape");
  return *g;
}

/// One optimizer step, as the trainer takes it; returns the global norm.
double step(Stream &stream, const Options &o, const SafetensorsFile &in,
            std::vector<Slot> &slots, int64_t t, float &lr) {
  std::vector<HostTensor> grads;
  double sumSquares = 0;
  for (Slot &s : slots) {
    grads.push_back(gradOf(in, t, s));
    sumSquares += cpu::sumOfSquares(stream, viewOf(grads.back()));
  }
  float scale = float(clipScaleFromSumOfSquares(sumSquares, o.clip));
  lr = o.schedule.learningRate(t);
  std::vector<TensorUpdate> tensors;
  for (size_t k = 0; k < slots.size(); ++k)
    tensors.push_back({viewOf(slots[k].value), viewOf(grads[k]),
                       viewOf(slots[k].first), viewOf(slots[k].second)});
  const TrainerKernels &kernels = findBackend("cpu")->trainer;
  switch (o.optimizer) {
  case OptimizerKind::AdamW:
    for (const TensorUpdate &u : tensors)
      cpu::adamwUpdate(stream, u.value, u.grad, u.first, u.second, o.adamw, lr,
                       t, scale);
    break;
  case OptimizerKind::Sgd:
    for (const TensorUpdate &u : tensors)
      cpu::sgdUpdate(stream, u.value, u.grad, u.first, o.sgd, lr, t, scale);
    break;
  case OptimizerKind::Lamb: // one device: every tensor is whole here
    lambStep(kernels, stream, tensors, o.lamb, lr, t, scale, nullptr);
    break;
  case OptimizerKind::Lars:
    larsStep(kernels, stream, tensors, o.lars, lr, scale, nullptr);
    break;
  }
  return std::sqrt(sumSquares);
}

void run(const std::string &inPath, const std::string &outPath) {
  SafetensorsFile in = readSafetensors(inPath);
  Options o = readOptions(in.metadata);
  std::vector<Slot> slots = readParams(in, o.optimizer);
  std::unique_ptr<Device> device = createDevice("cpu");
  std::vector<float> lrs, norms;
  for (int64_t t = 1; t <= o.steps; ++t) {
    float lr = 0;
    norms.push_back(float(step(device->computeStream(), o, in, slots, t, lr)));
    lrs.push_back(lr);
  }
  std::vector<TensorRef> out;
  for (Slot &s : slots) {
    out.push_back(
        {"param." + s.name, DType::F32, s.value.shape, s.value.data.data()});
    out.push_back(s.first.ref());
    if (hasSecondMoment(o.optimizer))
      out.push_back(s.second.ref());
  }
  out.push_back({"lr", DType::F32, {o.steps}, lrs.data()});
  out.push_back({"grad_norm", DType::F32, {o.steps}, norms.data()});
  writeSafetensors(outPath, out);
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: bmrt-optimizer-check IN.safetensors "
                         "OUT.safetensors\n");
    return 2;
  }
  try {
    run(argv[1], argv[2]);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "bmrt-optimizer-check: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
