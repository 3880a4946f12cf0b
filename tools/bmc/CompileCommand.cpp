//===- CompileCommand.cpp - `bmc compile MODEL.onnx -o OUT/` --------------===//
//
// Phases 1 to 7 of DESIGN.md: plan, import at the plan's micro-batch, build
// the training step, lower it to a step program, and write OUT/: the
// trainer (the runtime's prebuilt executable, which needs no MLIR), the
// step program it runs (step.bmp, readable), the forward program
// (forward.bmp, for checking the model against a reference), the step-0
// parameters (params.safetensors, or with --weights-at-load the specs the
// runtime generates them from, init.json), the plan (plan.json) and what
// the trainer needs to know of the model (trainer.json).
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"

#include "driver/CompileDriver.h"
#include "passes/plan/PlanOutput.h"

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/trainer/TrainerJson.h"

#include "bmrt/Error.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace bmc;
using llvm::StringRef;

namespace {

constexpr StringRef kHelp = R"(USAGE: bmc compile MODEL.onnx -o OUT/ [options]

Compiles the training of MODEL into OUT/trainer, an executable that runs the
training step on this machine's CPU: on one device, or on --gpus N MPI ranks
(mpirun -np N OUT/trainer) with the plan's data, tensor and expert
parallelism and ZeRO stage (pipeline stages are not compiled yet). The step
is planned first (as bmc plan does) or read from --plan, then
differentiated, partitioned and lowered to a step program per rank.

OPTIONS:
  -o DIR                the output folder (required; created if missing)
  --gpus N              devices: MPI ranks (default 1)
  --plan FILE           a plan from bmc plan -o for this model, instead of
                        planning (it sets the GPUs, batch, sequence and
                        the model's other symbolic dimensions)
  --global-batch N      samples per optimizer step (default 8)
  --seq N               sequence length (binds the model's 'seq' dimension)
  --dim NAME=VALUE      bind a symbolic dimension (repeatable)
  --cluster NAME|FILE   the cluster the plan is made for (as bmc plan)
  --optimizer O         adam (AdamW, default), sgd (with momentum), lamb or
                        lars (layer-wise trust ratios, for large batches)
  --precision P         bf16, fp16 or fp32: recorded in the plan; the CPU
                        runtime computes in fp32, the CUDA runtime's GEMMs
                        take bf16 inputs under bf16 (tensors stay fp32);
                        each says so at start-up
  --fix K=V,...         pin plan choices as bmc plan does; on one device
                        mb (micro-batch) and recompute (none|selective|full)
                        change the trainer
  --init random         initialise the parameters (the architectures'
                        papers' schemes) instead of reading them: for
                        graph-only models
  --seed N              the seed of --init random (default 1)
  --weights-at-load     with --init random: write each parameter's scheme
                        and the seed (init.json) instead of the values
                        (params.safetensors); the trainer and bmrt-forward
                        generate the same values when they load the folder
  --loss L              what a model whose output is not its own scalar
                        loss trains on: auto (default: cross-entropy for
                        logits with one label per sample or next tokens of
                        an integer input, else mean squared error),
                        cross-entropy or mse (against targets of the
                        output's shape, which the trainer draws)
  --device cpu|cuda     the backend the trainer runs on, written to
                        trainer.json (default cpu; the trainer's --device
                        overrides it)
  --fuse-attention on|off
                        make each attention core (scores, scale, causal
                        mask, softmax, context) one fused op whose kernels
                        never store the scores (default: on with --device
                        cuda, off with cpu; the CPU runs either; with
                        --plan, the plan's choice)
  --help                print this help
)";

/// The default batch of a compiled trainer: enough samples that a tiny
/// model's loss visibly falls within a minute on a CPU.
constexpr int64_t kDefaultGlobalBatch = 8;

struct CompileArgs {
  bm::CompileOptions options;
  std::string out;
  /// trainer.json's backend.
  std::string device = "cpu";
};

/// The step-0 parameters' file: values, or the specs to generate them from.
constexpr StringRef kParametersFile = "params.safetensors";
constexpr StringRef kInitFile = "init.json";

/// Applies one flag's value; the error line otherwise.
std::optional<std::string> applyFlag(StringRef flag, StringRef v,
                                     CompileArgs &out,
                                     std::optional<std::string> &init,
                                     uint64_t &seed) {
  bm::CompileOptions &o = out.options;
  if (flag == "-o") {
    out.out = v.str();
  } else if (llvm::is_contained(kPlanningFlags, flag)) {
    PlanningRequest request{o.training, o.import, o.cluster};
    return applyPlanningFlag(flag, v, request);
  } else if (flag == "--init") {
    if (v != "random")
      return "--init supports 'random', got '" + v.str() + "'";
    init = v.str();
  } else if (flag == "--device") {
    // The trainer's backends (runtime/cpu, runtime/cuda), whether or not
    // this machine built them in: one compiles here for a GPU machine.
    if (v != "cpu" && v != "cuda")
      return "--device must be cpu or cuda, got '" + v.str() + "'";
    out.device = v.str();
  } else if (flag == "--plan") {
    o.planFile = v.str();
  } else if (flag == "--loss") {
    if (!llvm::is_contained({"auto", "cross-entropy", "mse"}, v))
      return "--loss must be auto, cross-entropy or mse, got '" + v.str() + "'";
    o.loss = v.str();
  } else if (flag == "--seed") {
    if (v.getAsInteger(10, seed))
      return "--seed expects a non-negative integer, got '" + v.str() + "'";
  }
  return std::nullopt;
}

std::optional<int> parseArgs(llvm::ArrayRef<StringRef> args, CompileArgs &out) {
  ArgCursor cursor("compile", args);
  std::optional<std::string> init;
  uint64_t seed = 1;
  bool seedGiven = false, fuseGiven = false;
  std::vector<std::string> planningFlags;
  out.options.training.gpus = 1;
  out.options.training.globalBatch = kDefaultGlobalBatch;
  const std::vector<StringRef> flags = withPlanningFlags(
      {"-o", "--init", "--seed", "--plan", "--device", "--loss"});
  while (!cursor.done()) {
    if (cursor.takeSwitch("--help") || cursor.takeSwitch("-h")) {
      llvm::outs() << kHelp;
      return 0;
    }
    if (cursor.takeSwitch("--weights-at-load")) {
      out.options.weightsAtLoad = true;
      continue;
    }
    std::optional<std::string> value;
    StringRef matched = cursor.takeAnyFlag(flags, value);
    if (matched.empty()) {
      if (cursor.isOption())
        return cursor.unknownOption();
      StringRef positional = cursor.takePositional();
      if (!out.options.model.empty())
        return fail("bmc compile takes one model, got '" + out.options.model +
                    "' and '" + positional + "'");
      out.options.model = positional.str();
      continue;
    }
    if (cursor.error)
      return fail(*cursor.error);
    seedGiven |= matched == "--seed";
    fuseGiven |= matched == "--fuse-attention";
    if (matched == "--fix" || matched == "--global-batch" ||
        matched == "--cluster")
      planningFlags.push_back(matched.str());
    if (auto error = applyFlag(matched, *value, out, init, seed))
      return fail(*error);
  }
  if (out.options.model.empty())
    return fail("bmc compile needs a model file; see 'bmc compile --help'");
  if (out.out.empty())
    return fail("bmc compile needs an output folder: -o DIR");
  if (seedGiven && !init)
    return fail("--seed goes with --init random");
  if (out.options.weightsAtLoad && !init)
    return fail("--weights-at-load goes with --init random (a model's own "
                "weights are values, not a scheme)");
  if (out.options.planFile && !planningFlags.empty())
    return fail("--plan gives the configuration; " + planningFlags.front() +
                " goes with planning");
  if (init)
    out.options.initSeed = seed;
  // CUDA runs fused attention unless told not to; a plan file says for
  // itself (readPlanFile), and an explicit flag must agree with it.
  if (fuseGiven)
    out.options.fuseAttention = out.options.import.fuseAttention;
  else
    out.options.import.fuseAttention = out.device == "cuda";
  return std::nullopt;
}


std::string absolutePath(StringRef path) {
  llvm::SmallString<256> absolute(path);
  llvm::sys::fs::make_absolute(absolute);
  llvm::sys::path::remove_dots(absolute, /*remove_dot_dot=*/true);
  return std::string(absolute);
}

/// Each pipeline stage's step program: stage0.bmp, stage1.bmp, ...
std::string stageFile(size_t stage) {
  return "stage" + std::to_string(stage) + ".bmp";
}

std::vector<std::string> stageFiles(const bm::CompiledModel &model) {
  std::vector<std::string> files;
  for (size_t s = 0; s < model.stages.size(); ++s)
    files.push_back(stageFile(s));
  return files;
}

/// What the trainer needs to know of the model, for trainer.json (whose
/// keys only the runtime's TrainerJson.h knows).
bmrt::CompiledConfig trainerConfig(const bm::CompiledModel &model,
                                   const CompileArgs &args) {
  const bm::plan::Plan &plan = model.plan;
  bmrt::CompiledConfig config;
  config.model = plan.modelName;
  config.modelHash = model.modelHash;
  config.modelPath = absolutePath(args.options.model);
  config.task = bm::nameOf(model.task);
  config.globalBatch = plan.globalBatch;
  config.microBatch = plan.config.microBatch;
  config.microBatches = plan.config.numMicroBatches;
  config.ranks = plan.gpus;
  config.optimizer = bm::cost::trainerName(plan.optimizer);
  config.precision = bm::cost::toString(plan.precision);
  config.recompute = bm::plan::toString(plan.config.recompute);
  config.zero = plan.config.zeroStage;
  config.offload = bm::plan::toString(plan.config.offload);
  if (plan.config.cp > 1 && plan.config.cpMirrored)
    config.cpLayout = "mirrored";
  // Overlap where the cluster hides some of it, as the plan assumed.
  config.overlapGradReduce = plan.gradReduceOverlap > 0;
  config.pp = plan.config.pp;
  config.chunks = plan.config.chunks;
  config.schedule = bmrt::toString(plan.config.schedule);
  config.stageForward = plan.stageForward;
  config.stageBackward = plan.stageBackward;
  config.stageWeight = plan.stageWeight;
  config.program = model.stages.empty() ? "step.bmp" : stageFile(0);
  config.stages = stageFiles(model);
  config.plan = "plan.json";
  config.device = args.device;
  // The step-0 parameters: generated at load time, or their values.
  if (model.parameters.empty() && model.init)
    config.init = kInitFile.str();
  else
    config.parameters = kParametersFile.str();
  return config;
}

int writeParameters(const std::string &path, const bm::CompiledModel &model) {
  std::vector<bmrt::TensorRef> tensors;
  for (const bm::ParameterValue &p : model.parameters)
    tensors.push_back({p.name, p.dtype, p.shape, p.bytes.data()});
  try {
    bmrt::writeSafetensors(path, tensors, {{"model_hash", model.modelHash}});
  } catch (const bmrt::Error &e) {
    return fail(e.what());
  }
  return 0;
}

int writeOutputs(const CompileArgs &args, const bm::CompiledModel &model) {
  if (std::error_code ec = llvm::sys::fs::create_directories(args.out))
    return fail("cannot create '" + args.out + "': " + ec.message());
  auto in = [&](StringRef name) {
    llvm::SmallString<256> path(args.out);
    llvm::sys::path::append(path, name);
    return std::string(path);
  };
  std::string trainer = toolBesideBmc("bmrt-trainer");
  if (!llvm::sys::fs::exists(trainer))
    return fail("the runtime's trainer '" + trainer +
                "' is missing; build the bmrt-trainer target");
  if (std::error_code ec = llvm::sys::fs::copy_file(trainer, in("trainer")))
    return fail("cannot write '" + in("trainer") + "': " + ec.message());
  llvm::sys::fs::setPermissions(in("trainer"), llvm::sys::fs::all_read |
                                                   llvm::sys::fs::all_exe |
                                                   llvm::sys::fs::owner_write);
  int rc = 0;
  if (model.stages.empty())
    rc = rc ? rc : writeFile(in("step.bmp"), [&](llvm::raw_ostream &os) {
      os << bmrt::printProgram(model.step);
    });
  for (size_t s = 0; s < model.stages.size(); ++s)
    rc = rc ? rc : writeFile(in(stageFile(s)), [&](llvm::raw_ostream &os) {
      os << bmrt::printProgram(model.stages[s]);
    });
  // Under the name trainer.json gives it ("forward_program").
  std::string forward = in(bmrt::kForwardProgramFile);
  rc = rc ? rc : writeFile(forward, [&](llvm::raw_ostream &os) {
    os << bmrt::printProgram(model.forward);
  });
  rc = rc ? rc : writeFile(in("plan.json"), [&](llvm::raw_ostream &os) {
    bm::plan::printPlanJson(model.plan, os);
  });
  rc = rc ? rc : writeFile(in("trainer.json"), [&](llvm::raw_ostream &os) {
    os << bmrt::printConfig(trainerConfig(model, args));
  });
  if (rc)
    return rc;
  // A folder holds one of the two: a stale one from an earlier compile
  // into the same folder would only mislead.
  if (model.parameters.empty() && model.init) {
    llvm::sys::fs::remove(in(kParametersFile));
    return writeFile(in(kInitFile), [&](llvm::raw_ostream &os) {
      os << bmrt::printInitPlan(*model.init);
    });
  }
  llvm::sys::fs::remove(in(kInitFile));
  return writeParameters(in(kParametersFile), model);
}

} // namespace

int bmc::runCompile(llvm::ArrayRef<StringRef> args) {
  CompileArgs compileArgs;
  if (std::optional<int> exit = parseArgs(args, compileArgs))
    return *exit;
  mlir::MLIRContext context;
  auto model = bm::compileModel(context, compileArgs.options);
  if (!model)
    return fail(llvm::toString(model.takeError()));
  if (int rc = writeOutputs(compileArgs, *model))
    return rc;
  llvm::SmallString<256> trainer(compileArgs.out);
  llvm::sys::path::append(trainer, "trainer");
  size_t instructions = model->step.instrs.size();
  for (const bmrt::Program &stage : model->stages)
    instructions += stage.instrs.size();
  llvm::outs() << "compiled " << model->plan.modelName << " into " << trainer
               << ": " << instructions << " instructions"
               << (model->stages.empty()
                       ? std::string()
                       : " in " + std::to_string(model->stages.size()) +
                             " pipeline stages")
               << ", " << model->numParameterTensors() << " parameter tensors"
               << (model->parameters.empty() && model->init
                       ? " (generated at load time)"
                       : "")
               << ", micro-batch " << model->plan.config.microBatch << " x "
               << model->plan.config.numMicroBatches << " per step ("
               << bm::describe(model->task) << ")\n";
  return 0;
}
