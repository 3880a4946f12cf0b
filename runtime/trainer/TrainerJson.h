//===- TrainerJson.h - trainer.json: schema, writer, reader -----*- C++ -*-===//
//
// trainer.json is what `bmc compile` tells the trainer about the model
// beside the step program. Its keys live here and nowhere else: bmc fills a
// CompiledConfig and prints it, the trainer (and bmrt-forward) read it back.
// Part of the runtime (bmrt, no MLIR), which the tool links, so that the
// writer and the reader cannot drift apart.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_TRAINERJSON_H
#define BMRT_TRAINER_TRAINERJSON_H

#include "bmrt/Optimizer.h"
#include <cstdint>
#include <string>
#include <vector>

namespace bmrt {

/// The forward program `bmc compile` writes beside the step, for checking
/// the model against a reference (trainer.json's "forward_program").
inline constexpr const char *kForwardProgramFile = "forward.bmp";

/// trainer.json, one field per key (the key in quotes). The fields that
/// name files of the folder hold names relative to it when bmc fills them
/// for printConfig; readConfig joins them to the folder, so that the
/// trainer opens them from wherever it runs. Keys marked optional may be
/// absent from a file written by hand; readConfig gives the default.
struct CompiledConfig {
  /// "model": the model's name; "model_hash": the hash of the ONNX file;
  /// "model_path" (optional): where that file was compiled from.
  std::string model, modelHash, modelPath;
  /// "task": language-model, classifier, regression or own-loss.
  std::string task;
  /// "optimizer": adamw, sgd, lamb or lars; "precision": fp32, bf16 or
  /// fp16; "recompute" (optional, none): none, selective or full.
  std::string optimizer, precision, recompute = "none";
  /// `optimizer`, parsed.
  OptimizerKind optimizerKind = OptimizerKind::AdamW;
  /// "program": the step program (with a pipeline, stage 0's); "plan": the
  /// plan bmc made (plan.json).
  std::string program, plan;
  /// The step-0 parameters, exactly one of: "parameters", a safetensors
  /// file of values, or "init", init.json's specs to generate them from.
  std::string parameters, init;
  /// "device" (optional, cpu): the backend to run on ("cpu", "cuda");
  /// the trainer's --device overrides it.
  std::string device = "cpu";
  /// "micro_batch": samples per micro-batch on each data-parallel rank;
  /// "micro_batches": micro-batches per step; "global_batch" (optional):
  /// samples per step over all of them (0: not given).
  int64_t microBatch = 1, microBatches = 1, globalBatch = 0;
  /// "ranks" (optional, 1): ranks the step was compiled for.
  int ranks = 1;
  /// "zero" (optional, 0): the ZeRO stage over dp (0: none).
  int zero = 0;
  /// "offload" (optional, none): "optimizer" keeps the optimizer state and
  /// an fp32 copy of this rank's range of every trained parameter in host
  /// memory and runs the optimizer step there (ZeRO-Offload: Ren et al.
  /// 2021); bmc writes the key only when it is not "none".
  std::string offload = "none";
  /// "cp_layout" (optional, contiguous): "mirrored" where the plan's
  /// context parallelism gives each rank two mirrored chunks of each
  /// sequence (bmrt/ContextLayout.h): the feeder lays its inputs and
  /// labels out so. bmc writes the key only when mirrored.
  std::string cpLayout = "contiguous";
  /// "overlap_grad_reduce" (optional, true): reduce gradients during the
  /// backward (the plan's cluster hides some of that); the trainer's
  /// --overlap / --no-overlap decide instead.
  bool overlapGradReduce = true;
  /// "pp" (optional, 1): pipeline stages; "chunks" (optional, 1): virtual
  /// stages per rank; "schedule" (optional): none, gpipe, 1f1b or
  /// interleaved.
  int pp = 1, chunks = 1;
  std::string schedule = "none";
  /// "stage_times" (optional): each virtual stage's forward, backward and
  /// W seconds per micro-batch as the plan priced them ("forward",
  /// "backward", "weight"); the schedule's lists are generated with them
  /// (ZB-V's order follows them). Empty: the schedule's default costs.
  std::vector<double> stageForward, stageBackward, stageWeight;
  /// "stages" (optional, empty): with a pipeline, each virtual stage's
  /// program, in virtual-stage order.
  std::vector<std::string> stages;
};

/// trainer.json's text for CONFIG, as bmc compile writes it: keys in
/// alphabetical order, two-space indentation, a final newline, plus the
/// keys that only bmc writes ("format" and "forward_program").
std::string printConfig(const CompiledConfig &config);

/// Reads DIR/trainer.json; one line naming the file on anything missing.
CompiledConfig readConfig(const std::string &dir);

/// The step-0 parameters of folder DIR, joined to it: trainer.json's
/// "parameters" or "init" (exactly one is set), and DIR/params.safetensors
/// where there is no trainer.json. Only those two keys are read, for
/// programs that need nothing else of the file (bmrt-forward).
struct StepZeroFiles {
  std::string parameters, init;
};
StepZeroFiles readStepZeroFiles(const std::string &dir);

} // namespace bmrt

#endif // BMRT_TRAINER_TRAINERJSON_H
