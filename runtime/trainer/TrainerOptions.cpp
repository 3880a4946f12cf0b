//===- TrainerOptions.cpp - the trainer's command line --------------------===//

#include "TrainerOptions.h"

#include "bmrt/Backend.h"
#include "bmrt/Error.h"
#include "bmrt/Tool.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>

namespace bmrt {

const char *const kTrainerHelp =
    R"(USAGE: trainer [options]

Trains the model `bmc compile` built into this folder on the CPU, one line
per step on the terminal (and one JSON line per step with --log).

OPTIONS:
  --steps N          total optimizer steps; a resumed run goes on to step N
                     (default 100; 0 with --checkpoint saves the compiled
                     weights as the step-0 checkpoint)
  --data FILE        a flat file of token ids (nanoGPT / Megatron .bin), read
                     in order; for a classifier, a flat file of float32
                     samples (each of the model's input shape) with --labels;
                     without it, a learnable synthetic task
  --labels FILE      a classifier's labels, one per sample of --data
  --data-type T      uint16 or int32: the token ids of --data, or the labels
                     of --labels (default: the dtype Megatron's .idx beside
                     a .bin names, else uint16)
  --lr X             peak learning rate (default 3e-4 AdamW, 0.1 SGD, 1e-3
                     LAMB, 1 LARS: its steps are scaled by the trust
                     coefficient)
  --min-lr X         learning rate at the last step (default lr / 10)
  --warmup N         linear warm-up steps, then cosine decay (default
                     steps / 10)
  --weight-decay X   weight decay (default 0.01 AdamW and LAMB, 0 SGD,
                     1e-4 LARS)
  --momentum X       SGD's and LARS's momentum (default 0.9)
  --trust-coefficient X
                     LARS's trust coefficient eta (default 0.001)
  --clip X           global gradient-norm clipping (default 1.0; 0: off)
  --seed N           seed of the synthetic data (default 1)
  --log FILE         append one JSON line per step
  --checkpoint DIR   save parameters, optimizer state, step, data position
                     and RNG state to DIR: each save a new version folder,
                     published atomically (see the README's reliability)
  --keep N           checkpoint versions kept in DIR, newest first; older
                     ones are deleted after each save (default 2, at least 1)
  --save-every N     save every N steps (and at the end; needs --checkpoint)
  --resume           continue from --checkpoint DIR
  --stop-at N        stop after step N (with a checkpoint) as if interrupted;
                     --resume later goes on to --steps
  --threads N        CPU threads, 1 to 1024 (default: all)
  --timeout S        seconds a rank may wait in one collective or transfer
                     before it ends the job naming the collective and the
                     rank (default 600, as PyTorch's process groups; 0:
                     never). The other ranks' wait while rank 0 writes a
                     checkpoint, or loads one first at --resume, counts
                     too: keep S above the longest save
  --device NAME      the backend to run on: cpu, or cuda where built in
                     (default: trainer.json's device, else cpu)
  --device-memory G  hold at most G GiB on the device, as a smaller one
                     would (default: all it has); past it the run ends with
                     the out-of-memory line
  --precision P      fp32 or bf16: what GEMMs read their operands in (default:
                     trainer.json's precision). bf16 rounds the inputs of
                     every GEMM to bf16 and accumulates in fp32; weights,
                     activations, gradients and optimizer state stay fp32.
                     The CPU computes in fp32 whatever this says
  --dir DIR          the compiled folder (default: the trainer's own)
  --quiet            no per-step lines on the terminal
  --overlap          reduce the data-parallel gradients during the backward
  --no-overlap       ... or after it, blocking (default: as the plan's
                     cluster says: during it where the cluster hides some)
  --offload-behind   with the optimizer offloaded (AdamW, SGD), copy each
                     range down, step it and copy it up on a worker thread
                     behind the next forward
  --offload-after    ... or after the backward, one phase after another
                     (default: behind on a GPU, after on the CPU backend,
                     whose host step would share the ranks' cores; LAMB
                     and LARS always after)
  --bucket-mb X      gradients reduced together during the backward, at
                     least X MiB per collective (default 4; a larger tensor
                     is a bucket of its own)
  --print-schedule   print each pipeline rank's instruction list of the
                     plan's schedule as a rank x time grid, and exit
  --help             print this help
)";

namespace {

/// The most --threads: OpenMP's runtime (libgomp) puts per-thread start
/// data on the calling thread's stack, so a team of 100000 overflows it
/// (a segfault); past the cores more threads only take turns. 1024 is
/// bmrt-calibrate's bound too.
constexpr int64_t kMaxThreads = 1024;

float parseFloat(const std::string &flag, const std::string &text) {
  size_t used = 0;
  float value = 0;
  try {
    value = std::stof(text, &used);
  } catch (const std::logic_error &) {
    used = 0;
  }
  BMRT_CHECK(used == text.size() && used > 0 && value >= 0 &&
                 std::isfinite(value),
             flag + " expects a finite non-negative number, got '" + text +
                 "'");
  return value;
}

} // namespace

double startTimeoutOf(const std::vector<std::string> &args) {
  double seconds = TrainerOptions().timeoutSeconds;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string text;
    if (args[i] == "--timeout" && i + 1 < args.size())
      text = args[i + 1];
    else if (args[i].rfind("--timeout=", 0) == 0)
      text = args[i].substr(10);
    else
      continue;
    try {
      seconds = parseFloat("--timeout", text);
    } catch (const Error &) {
      // parseTrainerOptions says what is wrong, once the job has started.
    }
  }
  return seconds;
}

std::optional<TrainerOptions>
parseTrainerOptions(const std::vector<std::string> &args,
                    const std::string &selfDir) {
  TrainerOptions o;
  o.dir = selfDir;
  using Setter = std::function<void(const std::string &)>;
  const std::map<std::string, Setter> valued = {
      {"--bucket-mb",
       [&](auto &v) {
         o.bucketMb = parseFloat("--bucket-mb", v);
         BMRT_CHECK(o.bucketMb > 0,
                    "--bucket-mb must be more than 0, got '" + v + "'");
       }},
      {"--checkpoint", [&](auto &v) { o.checkpoint = v; }},
      {"--clip", [&](auto &v) { o.clip = parseFloat("--clip", v); }},
      {"--data", [&](auto &v) { o.data = v; }},
      {"--data-type",
       [&](auto &v) {
         BMRT_CHECK(v == "uint16" || v == "int32",
                    "--data-type must be uint16 or int32, got '" + v + "'");
         o.dataType = v;
       }},
      {"--device",
       [&](auto &v) {
         BMRT_CHECK(findBackend(v), "--device must name a backend of this "
                                    "build (" + builtinBackendNames() +
                                        "), got '" + v + "'");
         o.device = v;
       }},
      {"--device-memory",
       [&](auto &v) {
         float gib = parseFloat("--device-memory", v);
         BMRT_CHECK(gib > 0,
                    "--device-memory must be above 0 GiB, got '" + v + "'");
         o.deviceMemory = static_cast<size_t>(double(gib) * (1ull << 30));
       }},
      {"--dir", [&](auto &v) { o.dir = v; }},
      {"--keep", [&](auto &v) { o.keep = parseIntegerFlag("--keep", v, 1); }},
      {"--labels", [&](auto &v) { o.labels = v; }},
      {"--log", [&](auto &v) { o.log = v; }},
      {"--lr", [&](auto &v) { o.lr = parseFloat("--lr", v); }},
      {"--min-lr", [&](auto &v) { o.minLr = parseFloat("--min-lr", v); }},
      {"--momentum",
       [&](auto &v) { o.momentum = parseFloat("--momentum", v); }},
      {"--trust-coefficient",
       [&](auto &v) {
         o.trustCoefficient = parseFloat("--trust-coefficient", v);
       }},
      {"--precision",
       [&](auto &v) {
         ContractionPrecision p;
         BMRT_CHECK(parseContractionPrecision(v, p) &&
                        p != ContractionPrecision::F16,
                    "--precision must be fp32 or bf16 (fp16 needs loss "
                    "scaling, not built yet), got '" + v + "'");
         o.precision = p;
       }},
      {"--save-every",
       [&](auto &v) { o.saveEvery = parseIntegerFlag("--save-every", v, 1); }},
      {"--seed",
       [&](auto &v) {
         o.seed = static_cast<uint64_t>(parseIntegerFlag("--seed", v, 0));
       }},
      {"--steps",
       [&](auto &v) { o.steps = parseIntegerFlag("--steps", v, 0); }},
      {"--stop-at",
       [&](auto &v) { o.stopAt = parseIntegerFlag("--stop-at", v, 1); }},
      {"--threads",
       [&](auto &v) {
         o.threads =
             static_cast<int>(parseIntegerFlag("--threads", v, 1, kMaxThreads));
       }},
      {"--timeout",
       [&](auto &v) { o.timeoutSeconds = parseFloat("--timeout", v); }},
      {"--warmup",
       [&](auto &v) { o.warmup = parseIntegerFlag("--warmup", v, 0); }},
      {"--weight-decay",
       [&](auto &v) { o.weightDecay = parseFloat("--weight-decay", v); }},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i], value;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kTrainerHelp, stdout);
      return std::nullopt;
    }
    if (arg == "--resume") {
      o.resume = true;
      continue;
    }
    if (arg == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (arg == "--overlap" || arg == "--no-overlap") {
      o.overlap = arg == "--overlap";
      continue;
    }
    if (arg == "--offload-behind" || arg == "--offload-after") {
      o.offloadBehind = arg == "--offload-behind";
      continue;
    }
    if (arg == "--print-schedule") {
      o.printSchedule = true;
      continue;
    }
    size_t eq = arg.find('=');
    bool inlineValue = arg.rfind("--", 0) == 0 && eq != std::string::npos;
    if (inlineValue) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    }
    auto it = valued.find(arg);
    BMRT_CHECK(it != valued.end(), "unknown option '" + args[i] +
                                       "'; see 'trainer --help'");
    if (!inlineValue) {
      BMRT_CHECK(i + 1 < args.size(), "option '" + arg + "' needs a value");
      value = args[++i];
    }
    it->second(value);
  }
  BMRT_CHECK(!o.resume || !o.checkpoint.empty(),
             "--resume needs --checkpoint DIR (where to resume from)");
  BMRT_CHECK(o.labels.empty() || !o.data.empty(),
             "--labels goes with --data (the samples they label)");
  BMRT_CHECK(o.saveEvery == 0 || !o.checkpoint.empty(),
             "--save-every needs --checkpoint DIR");
  return o;
}

} // namespace bmrt
