//===- step_timer.cpp - `bmrt-step-timer`: time a compiled program --------===//
//
//   bmrt-step-timer DIR [--program forward|step] [--warmup W] [--runs N]
//                   [--threads T] [--optimizer] [--profile] [--seed S]
//                   [--device cpu|cuda] [--precision fp32|bf16]
//
// Loads DIR/forward.bmp (default) or DIR/step.bmp with DIR/params.safetensors
// (a folder compiled with --weights-at-load has none: its parameters are
// drawn from N(0, 0.02), which times the same),
// fills the inputs (integer ids within the tables they index, N(0, 1) floats,
// labels within the loss's classes), runs the program W times to warm up and
// N times timed, and prints one JSON object: the median and minimum seconds
// per run, and each run's time. The Python benchmarks (bench/forward_bench.py,
// bench/train_step_bench.py) read it.
//
// --optimizer (step programs): each run also does what the trainer does after
// the program, the global gradient norm and an AdamW update of every trained
// parameter, so a run is a whole training step.
// --profile: runs the instructions one at a time (Executor::runRange, then a
// synchronize of the device's stream) and adds their times up by op name and by
// phase (forward up to the loss, backward after it, the optimizer); the slowest
// single instructions are listed too. The median is then of runs made that way.
//
// Links bmrt only (no MLIR), like the trainer.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/Safetensors.h"

#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Sharding.h"

#include <cblas.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>

namespace {

using namespace bmrt;
using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

/// Instructions listed one by one in the profile.
constexpr size_t kSlowestListed = 15;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Options {
  std::string dir;
  std::string program = "forward";
  int warmup = 2;
  int runs = 5;
  int threads = 0; // 0: leave OpenMP's and OpenBLAS's defaults
  bool optimizer = false;
  bool profile = false;
  uint64_t seed = 1;
  std::string device = "cpu";
  ContractionPrecision precision = ContractionPrecision::F32;
};

const char *kUsage =
    "usage: bmrt-step-timer DIR [--program forward|step] [--warmup W] "
    "[--runs N] [--threads T] [--optimizer] [--profile] [--seed S] "
    "[--device cpu|cuda] [--precision fp32|bf16]\n";

int parsePositive(const std::string &flag, const char *value, int least) {
  char *end = nullptr;
  long parsed = std::strtol(value, &end, 10);
  BMRT_CHECK(*value && !*end && parsed >= least && parsed <= INT_MAX,
             flag + " needs an integer >= " + std::to_string(least) +
                 ", got '" + value + "'");
  return static_cast<int>(parsed);
}

Options parseOptions(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char * {
      BMRT_CHECK(i + 1 < argc, arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--program")
      o.program = value();
    else if (arg == "--warmup")
      o.warmup = parsePositive(arg, value(), 0);
    else if (arg == "--runs")
      o.runs = parsePositive(arg, value(), 1);
    else if (arg == "--threads")
      o.threads = parsePositive(arg, value(), 1);
    else if (arg == "--seed")
      o.seed = parsePositive(arg, value(), 0);
    else if (arg == "--optimizer")
      o.optimizer = true;
    else if (arg == "--profile")
      o.profile = true;
    else if (arg == "--device")
      o.device = value();
    else if (arg == "--precision") {
      std::string name = value();
      BMRT_CHECK(parseContractionPrecision(name, o.precision),
                 "--precision must be fp32, bf16 or fp16, got '" + name + "'");
    } else if (!arg.empty() && arg[0] != '-' && o.dir.empty())
      o.dir = arg;
    else
      BMRT_FAIL("unknown argument '" + arg + "'");
  }
  BMRT_CHECK(!o.dir.empty(), "no compiled folder given");
  BMRT_CHECK(o.program == "forward" || o.program == "step",
             "--program must be forward or step, got '" + o.program + "'");
  return o;
}

//===----------------------------------------------------------------------===//
// Loading and filling
//===----------------------------------------------------------------------===//

/// Parameters from N(0, 0.02) for a folder without params.safetensors:
/// kernel times do not depend on the values.
void drawParameters(Executor &executor, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const Program &program = executor.program();
  for (int slot : program.slotsOf(SlotKind::Param)) {
    const TensorView &view = executor.view(slot);
    if (view.dtype != DType::F32)
      continue; // masks and tables: left as allocated (zeros)
    std::vector<float> host(view.size());
    std::generate(host.begin(), host.end(), [&] { return normal(rng); });
    executor.device().copyToDevice(view.data, host.data(), view.bytes(),
                                   executor.stream());
  }
}

void loadParameters(Executor &executor, const std::string &path) {
  SafetensorsFile file = readSafetensors(path);
  const Program &program = executor.program();
  for (int slot : program.slotsOf(SlotKind::Param)) {
    const std::string &name = program.slots[slot].name;
    const TensorView &view = executor.view(slot);
    const HostTensor *t = findTensor(file.tensors, name);
    BMRT_CHECK(t, "'" + path + "' has no tensor '" + name + "'");
    BMRT_CHECK(t->dtype == view.dtype && t->shape == view.shape,
               "'" + path + "': '" + name + "' is " + nameOf(t->dtype) +
                   formatShape(t->shape) + ", the program needs " +
                   nameOf(view.dtype) + formatShape(view.shape));
    executor.device().copyToDevice(view.data, t->data.data(), view.bytes(),
                                   executor.stream());
  }
}

/// Ids an integer slot may hold (bmrt::idBound): the loss's classes bound
/// labels only; inputs, by the tables they index.
int64_t idBoundOf(const Program &program, int slot) {
  bool label = program.slots[slot].kind == SlotKind::Label;
  return idBound(program, slot, label ? lossClasses(program) : 0);
}

template <typename T>
void upload(Executor &executor, int slot, const std::vector<T> &host) {
  const TensorView &view = executor.view(slot);
  executor.device().copyToDevice(view.data, host.data(), view.bytes(),
                                 executor.stream());
}

void fillSlot(Executor &executor, int slot, std::mt19937_64 &rng) {
  const Slot &s = executor.program().slots[slot];
  int64_t n = numElements(s.shape);
  if (s.dtype == DType::I64) {
    std::uniform_int_distribution<int64_t> id(
        0, idBoundOf(executor.program(), slot) - 1);
    std::vector<int64_t> ids(n);
    std::generate(ids.begin(), ids.end(), [&] { return id(rng); });
    upload(executor, slot, ids);
    return;
  }
  BMRT_CHECK(s.dtype == DType::F32, "input '" + s.name + "' is " +
                                        nameOf(s.dtype) +
                                        "; the timer fills i64 and f32 inputs");
  std::normal_distribution<float> normal;
  std::vector<float> values(n);
  std::generate(values.begin(), values.end(), [&] { return normal(rng); });
  upload(executor, slot, values);
}

/// Fills every input and label once: the timed runs read the same batch.
void fillInputs(Executor &executor, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Program &program = executor.program();
  for (SlotKind kind : {SlotKind::Input, SlotKind::Label})
    for (int slot : program.slotsOf(kind))
      fillSlot(executor, slot, rng);
  executor.stream().synchronize();
}

//===----------------------------------------------------------------------===//
// The optimizer step the trainer runs after the program
//===----------------------------------------------------------------------===//

/// AdamW state for every parameter with a gradient, updated as the trainer
/// does (Trainer::trainStep: global norm, clipping at 1, AdamW).
class Optimizer {
public:
  explicit Optimizer(Executor &executor) : executor(executor) {
    const Program &program = executor.program();
    for (int slot : program.slotsOf(SlotKind::Param)) {
      int grad = program.gradientOf(slot);
      if (grad < 0)
        continue;
      const TensorView &value = executor.view(slot);
      params.push_back(
          {value, executor.view(grad), stateLike(value), stateLike(value)});
    }
  }
  ~Optimizer() {
    for (const Param &p : params)
      for (void *data : {p.m.data, p.v.data})
        executor.device().deallocate(data, p.value.bytes(),
                                     MemoryKind::OptimizerState);
  }
  Optimizer(const Optimizer &) = delete;
  Optimizer &operator=(const Optimizer &) = delete;

  /// The global gradient norm's sum of squares (the clipping's input).
  double sumOfSquares() {
    std::vector<TensorView> grads;
    for (const Param &p : params)
      grads.push_back(p.grad);
    return kernels().sumOfSquares(executor.stream(), grads);
  }

  void update(double sumSquares) {
    double norm = std::sqrt(sumSquares);
    float scale = norm > kClip ? static_cast<float>(kClip / norm) : 1.f;
    ++step;
    for (const Param &p : params)
      kernels().adamwUpdate(executor.stream(), p.value, p.grad, p.m, p.v,
                            config, kLearningRate, step, scale);
    executor.stream().synchronize();
  }

private:
  static constexpr double kClip = 1.0;
  static constexpr float kLearningRate = 3e-4f;

  struct Param {
    TensorView value, grad, m, v;
  };

  const TrainerKernels &kernels() const {
    return executor.device().backend().trainer;
  }

  /// A zeroed moment buffer shaped like `value`.
  TensorView stateLike(const TensorView &value) {
    TensorView state = value;
    state.data =
        executor.device().allocate(value.bytes(), MemoryKind::OptimizerState);
    return state;
  }

  Executor &executor;
  std::vector<Param> params;
  AdamWConfig config;
  int64_t step = 0;
};

//===----------------------------------------------------------------------===//
// Timing
//===----------------------------------------------------------------------===//

/// Seconds spent per instruction (index = instruction; two more at the end
/// for the optimizer's norm and update), summed over the profiled runs.
struct Profile {
  std::vector<double> seconds;
  int runs = 0;
};

double timeRun(Executor &executor, Optimizer *optimizer) {
  Clock::time_point start = Clock::now();
  executor.run();
  if (optimizer)
    optimizer->update(optimizer->sumOfSquares());
  executor.stream().synchronize(); // a GPU's kernels finish after their launch
  return secondsSince(start);
}

/// One run instruction by instruction; the sum of their times is the run's.
double profileRun(Executor &executor, Optimizer *optimizer, Profile &profile) {
  size_t count = executor.program().instrs.size();
  profile.seconds.resize(count + 2, 0.0);
  double total = 0;
  for (size_t i = 0; i < count; ++i) {
    Clock::time_point start = Clock::now();
    executor.runRange(i, i + 1);
    executor.stream().synchronize();
    double s = secondsSince(start);
    profile.seconds[i] += s;
    total += s;
  }
  if (optimizer) {
    Clock::time_point start = Clock::now();
    double sumSquares = optimizer->sumOfSquares();
    double norm = secondsSince(start);
    start = Clock::now();
    optimizer->update(sumSquares);
    double update = secondsSince(start);
    profile.seconds[count] += norm;
    profile.seconds[count + 1] += update;
    total += norm + update;
  }
  ++profile.runs;
  return total;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

//===----------------------------------------------------------------------===//
// The profile's report
//===----------------------------------------------------------------------===//

/// The instruction that computes the loss: the forward pass ends there.
size_t lossInstr(const Program &program) {
  for (size_t i = 0; i < program.instrs.size(); ++i)
    for (int result : program.instrs[i].results)
      if (result == program.loss)
        return i;
  return program.instrs.size();
}

struct Bucket {
  double seconds = 0;
  int count = 0;
};

json bucketsJson(const std::map<std::string, Bucket> &buckets, double total,
                 int runs, const char *key) {
  std::vector<std::pair<std::string, Bucket>> sorted(buckets.begin(),
                                                     buckets.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) {
    return a.second.seconds > b.second.seconds;
  });
  json rows = json::array();
  for (const auto &[name, bucket] : sorted)
    rows.push_back({{key, name},
                    {"seconds", bucket.seconds / runs},
                    {"share", bucket.seconds / total},
                    {"instructions", bucket.count}});
  return rows;
}

std::string describeInstr(const Program &program, const Instr &instr) {
  std::string text = instr.op;
  for (size_t i = 0; i < instr.operands.size(); ++i) {
    int slot = instr.operands[i];
    text +=
        (i ? ", " : " ") +
        (slot < 0 ? std::string("-") : formatShape(program.slots[slot].shape));
  }
  return text + "  # " + instr.comment;
}

json profileJson(const Program &program, const Profile &profile) {
  size_t count = program.instrs.size(), forwardEnd = lossInstr(program);
  std::map<std::string, Bucket> byOp, byPhase;
  double total = 0;
  auto add = [&](const std::string &op, const std::string &phase, double s) {
    byOp[op].seconds += s;
    ++byOp[op].count;
    byPhase[phase].seconds += s;
    ++byPhase[phase].count;
    total += s;
  };
  for (size_t i = 0; i < count; ++i)
    add(program.instrs[i].op, i <= forwardEnd ? "forward" : "backward",
        profile.seconds[i]);
  if (profile.seconds[count] + profile.seconds[count + 1] > 0) {
    add("(optimizer) sum_of_squares", "optimizer", profile.seconds[count]);
    add("(optimizer) adamw_update", "optimizer", profile.seconds[count + 1]);
  }
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i)
    order[i] = i;
  size_t listed = std::min(kSlowestListed, count);
  std::partial_sort(order.begin(), order.begin() + listed, order.end(),
                    [&](size_t a, size_t b) {
                      return profile.seconds[a] > profile.seconds[b];
                    });
  json slowest = json::array();
  for (size_t k = 0; k < listed; ++k)
    slowest.push_back(
        {{"index", order[k]},
         {"seconds", profile.seconds[order[k]] / profile.runs},
         {"instruction", describeInstr(program, program.instrs[order[k]])}});
  return {{"seconds", total / profile.runs},
          {"by_phase", bucketsJson(byPhase, total, profile.runs, "phase")},
          {"by_op", bucketsJson(byOp, total, profile.runs, "op")},
          {"slowest", slowest}};
}

//===----------------------------------------------------------------------===//

json run(const Options &options) {
  std::string path = options.dir + "/" + options.program + ".bmp";
  Program program = loadProgram(path);
  bool isStep = program.loss >= 0;
  BMRT_CHECK(isStep || !options.optimizer,
             "--optimizer needs a step program; '" + path + "' is forward");
  DeviceOptions deviceOptions;
  deviceOptions.threads = options.threads;
  deviceOptions.contractionPrecision = options.precision;
  std::unique_ptr<Device> device = createDevice(options.device, deviceOptions);
  Executor executor(program, *device);
  std::string params = options.dir + "/params.safetensors";
  if (std::ifstream(params))
    loadParameters(executor, params);
  else
    drawParameters(executor, options.seed);
  fillInputs(executor, options.seed);
  std::unique_ptr<Optimizer> optimizer;
  if (options.optimizer)
    optimizer = std::make_unique<Optimizer>(executor);

  Profile profile;
  auto once = [&] {
    return options.profile ? profileRun(executor, optimizer.get(), profile)
                           : timeRun(executor, optimizer.get());
  };
  for (int i = 0; i < options.warmup; ++i)
    once();
  profile = Profile();
  std::vector<double> times;
  for (int i = 0; i < options.runs; ++i)
    times.push_back(once());

  // The executor runs (and the profile names) the program with its layer
  // calls inlined.
  const Program &inlined = executor.program();
  json result = {{"program", path},
                 {"instructions", inlined.instrs.size()},
                 {"device", options.device},
                 {"precision", nameOf(device->contractionPrecision())},
                 {"threads", options.threads},
                 // OpenBLAS picks its kernels by CPU model; an unknown model
                 // falls back to an older core's (OPENBLAS_CORETYPE overrides).
                 {"openblas_core", openblas_get_corename()},
                 {"optimizer", options.optimizer},
                 {"warmup", options.warmup},
                 {"runs", options.runs},
                 {"median_s", median(times)},
                 {"min_s", *std::min_element(times.begin(), times.end())},
                 {"times_s", times},
                 {"arena_bytes", executor.arenaBytes()},
                 {"peak_bytes", device->peakTotalBytes()}};
  if (options.profile)
    result["profile"] = profileJson(inlined, profile);
  return result;
}

} // namespace

int main(int argc, char **argv) {
  try {
    Options options = parseOptions(argc, argv);
    std::printf("%s\n", run(options).dump(1).c_str());
    return 0;
  } catch (const bmrt::Error &e) {
    std::fprintf(stderr, "bmrt-step-timer: error: %s\n%s", e.what(), kUsage);
    return 1;
  }
}
