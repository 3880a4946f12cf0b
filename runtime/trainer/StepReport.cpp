//===- StepReport.cpp - what each step prints and logs --------------------===//

#include "StepReport.h"

#include "bmrt/Error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace bmrt {

void StepReport::print(const TrainerOptions &options, std::FILE *out) const {
  if (options.quiet)
    return;
  double rate = seconds > 0 ? double(items) / seconds : 0;
  double eta = seconds * double(steps - step);
  std::fprintf(out,
               "step %*lld/%lld (%3d%%) | loss %.4f | lr %.3e | %.1f ms | "
               "%.0f %s/s | peak %.1f MiB | grad norm %.3f | eta %.0f s\n",
               static_cast<int>(std::to_string(steps).size()),
               static_cast<long long>(step), static_cast<long long>(steps),
               static_cast<int>(100 * step / std::max<int64_t>(steps, 1)),
               loss, lr, seconds * 1e3, rate, itemName,
               double(peakTotal) / (1024.0 * 1024.0), gradNorm, eta);
  std::fflush(out);
}

std::string StepReport::json() const {
  nlohmann::json j;
  j["step"] = step;
  j["loss"] = loss;
  j["lr"] = lr;
  j["grad_norm"] = gradNorm;
  j["rank"] = rank;
  j["step_time_s"] = seconds;
  double communicating = 0;
  nlohmann::json byAxis = nlohmann::json::object();
  for (const auto &[group, time] : communication) {
    byAxis[group] = time;
    communicating += time;
  }
  j["compute_time_s"] = seconds - communicating - bubble;
  j["communication_time_s"] = byAxis;
  j["bubble_time_s"] = bubble;
  j["overlap_window_s"] = overlapWindow;
  j[std::string(itemName) + "_per_s"] =
      seconds > 0 ? double(items) / seconds : 0.0;
  nlohmann::json memory;
  for (int k = 0; k < kNumMemoryKinds; ++k)
    memory[nameOf(static_cast<MemoryKind>(k))] = peakBytes[k];
  memory["total"] = peakTotal;
  j["peak_memory_bytes"] = memory;
  if (!offload.empty()) {
    j["offload_time_s"] = offload;
    j["host_peak_memory_bytes"] = hostPeakTotal;
  }
  return j.dump();
}

Hyperparameters Hyperparameters::from(const TrainerOptions &options,
                                      const std::string &optimizer) {
  Hyperparameters h;
  OptimizerKind kind = OptimizerKind::AdamW;
  parseOptimizer(optimizer, kind);
  // Defaults: AdamW as Megatron-LM's GPT recipes (3e-4 peak after warm-up,
  // weight decay 0.01); SGD at the usual 0.1 with momentum 0.9; LAMB at
  // NVIDIA apex's FusedLAMB defaults (1e-3, 0.01); LARS at 1 with the
  // paper's trust coefficient 0.001, so that a tensor moves by about 0.1%
  // of its norm per step.
  float lr = options.lr.value_or(kind == OptimizerKind::AdamW  ? 3e-4f
                                 : kind == OptimizerKind::Sgd  ? 0.1f
                                 : kind == OptimizerKind::Lamb ? 1e-3f
                                                               : 1.0f);
  int64_t warmup = options.warmup.value_or(options.steps / 10);
  BMRT_CHECK(warmup <= options.steps,
             "--warmup " + std::to_string(warmup) + " is longer than --steps " +
                 std::to_string(options.steps));
  h.schedule = LrSchedule(lr, warmup, options.steps, options.minLr);
  h.adamw.weightDecay = options.weightDecay.value_or(0.01f);
  h.sgd.weightDecay = options.weightDecay.value_or(0.0f);
  h.sgd.momentum = options.momentum;
  h.lamb.weightDecay = options.weightDecay.value_or(0.01f);
  h.lars.weightDecay = options.weightDecay.value_or(1e-4f);
  h.lars.momentum = options.momentum;
  h.lars.trustCoefficient = options.trustCoefficient;
  h.clip = options.clip;
  return h;
}

std::string Hyperparameters::describe(const std::string &optimizer) const {
  char text[256];
  OptimizerKind kind = OptimizerKind::AdamW;
  parseOptimizer(optimizer, kind);
  float decay = this->adamw.weightDecay;
  std::string extra;
  char number[64];
  if (kind == OptimizerKind::Sgd) {
    decay = sgd.weightDecay;
    std::snprintf(number, sizeof number, ", momentum %g", sgd.momentum);
    extra = number;
  } else if (kind == OptimizerKind::Lamb) {
    decay = lamb.weightDecay;
  } else if (kind == OptimizerKind::Lars) {
    decay = lars.weightDecay;
    std::snprintf(number, sizeof number, ", momentum %g, trust coefficient %g",
                  lars.momentum, lars.trustCoefficient);
    extra = number;
  }
  std::snprintf(text, sizeof text,
                "%s (lr %.1e, warm-up %lld, cosine to %.1e, weight decay %g%s, "
                "clip %g)",
                optimizer.c_str(), schedule.peak(),
                static_cast<long long>(schedule.warmup()), schedule.minimum(),
                decay, extra.c_str(), clip);
  return text;
}

StepLog::StepLog(const std::string &path) : path(path) {
  file = std::fopen(path.c_str(), "a");
  if (!file)
    fail(errno);
}

StepLog::~StepLog() {
  if (file)
    std::fclose(file);
}

void StepLog::write(const std::string &line) {
  errno = 0;
  if (std::fputs(line.c_str(), file) == EOF || std::fputc('\n', file) == EOF ||
      std::fflush(file) != 0)
    fail(errno);
}

void StepLog::close() {
  std::FILE *closing = file;
  file = nullptr;
  errno = 0;
  if (std::fclose(closing) != 0)
    fail(errno);
}

void StepLog::fail(int error) const {
  BMRT_FAIL("cannot write the log '" + path + "'" +
            (error ? std::string(": ") + std::strerror(error) : std::string()));
}

} // namespace bmrt
