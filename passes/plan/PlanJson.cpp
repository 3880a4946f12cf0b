//===- PlanJson.cpp - the JSON plan: writer and reader --------------------===//
//
// Schema: passes/plan/PLAN_SCHEMA.md. Keys are written in a fixed order and
// numbers with a fixed format, so the same plan gives the same bytes.
//
//===----------------------------------------------------------------------===//

#include "passes/plan/PlanOutput.h"

#include "cost/TextShape.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <cmath>

using namespace bm::plan;
using llvm::json::OStream;

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

static void writeConfig(OStream &j, const ParallelConfig &c) {
  j.attribute("dp", c.dp);
  // Only where the sequence is split: other plans keep their bytes.
  if (c.cp > 1) {
    j.attribute("cp", c.cp);
    j.attribute("cp_layout", c.cpMirrored ? "mirrored" : "contiguous");
  }
  j.attribute("ep", c.ep);
  j.attribute("tp", c.tp);
  // Only with 2-D tensor parallelism, as cp.
  if (c.tp2 > 1)
    j.attribute("tp2", c.tp2);
  j.attribute("pp", c.pp);
  j.attribute("micro_batch", c.microBatch);
  j.attribute("num_micro_batches", c.numMicroBatches);
  j.attribute("zero_stage", c.zeroStage);
  j.attribute("recompute", toString(c.recompute));
  j.attribute("schedule", bmrt::toString(c.schedule));
  j.attribute("chunks", c.chunks);
  j.attribute("stream", toString(c.stream));
  j.attribute("stream_dim", c.streamDim);
  // Only where the optimizer is offloaded: other plans keep their bytes.
  if (c.offload != Offload::None)
    j.attribute("offload", toString(c.offload));
}

static void writeStrings(OStream &j, const std::vector<std::string> &items) {
  j.array([&] {
    for (const std::string &item : items)
      j.value(item);
  });
}

static void writeTensor(OStream &j, const TensorSharding &t) {
  j.object([&] {
    j.attributeArray("dims", [&] {
      for (const std::vector<std::string> &axes : t.dims)
        writeStrings(j, axes);
    });
    j.attributeBegin("partial");
    writeStrings(j, t.partialAxes);
    j.attributeEnd();
  });
}

static void writeTimeParts(OStream &j, const TimeBreakdown &t) {
  j.attribute("compute", t.compute);
  j.attribute("nvlink", t.nvlink);
  j.attribute("network", t.network);
  j.attribute("bubble", t.bubble);
  if (t.hostLink > 0)
    j.attribute("host_link", t.hostLink);
}

static void writeMemoryParts(OStream &j, const MemoryBreakdown &m) {
  j.attribute("params", m.params);
  j.attribute("grads", m.grads);
  j.attribute("optimizer", m.optimizer);
  j.attribute("activations", m.activations);
  j.attribute("buffers", m.buffers);
  if (m.host > 0)
    j.attribute("host", m.host);
  j.attribute("total", m.total());
}

static void writeItem(OStream &j, const CostItem &item) {
  j.attribute("kind", toString(item.kind));
  j.attribute("what", item.what);
  j.attribute("axis", item.axis);
  j.attribute("link", item.link);
  j.attribute("phase", item.phase);
  j.attribute("where", item.where);
  j.attribute("stage", item.stage);
  j.attribute("devices", item.devices);
  j.attribute("bytes", item.bytes);
  j.attribute("count", item.count);
  j.attribute("seconds", item.seconds);
  j.attribute("after_pipeline", item.afterPipeline);
  j.attribute("hidden", item.hidden);
  j.attribute("hidden_seconds", item.hiddenSeconds);
}

/// Whether the plan writes `symbolic_dims`: not when there are none, nor
/// when they are just "seq" at `sequence_length` (every model with one
/// token input), which `sequence_length` says already; those plans keep the
/// bytes they had before the key was added.
static bool writesDims(const Plan &plan) {
  const std::map<std::string, int64_t> &dims = plan.symbolicDims;
  if (dims.empty())
    return false;
  return !(dims.size() == 1 && dims.begin()->first == "seq" &&
           dims.begin()->second == plan.sequenceLength);
}

/// What the plan is for: model, cluster, GPUs, batch, precision.
static void writeRequest(OStream &j, const Plan &plan) {
  j.attribute("schema_version", Plan::kSchemaVersion);
  j.attribute("model", plan.modelName);
  j.attribute("cluster", plan.clusterName);
  j.attribute("cluster_calibrated", plan.clusterCalibrated);
  if (plan.clusterCalibrated)
    j.attributeObject("cluster_calibration", [&] {
      j.attribute("machine", plan.calibrationMachine);
      j.attribute("date", plan.calibrationDate);
    });
  j.attribute("grad_reduce_overlap", plan.gradReduceOverlap);
  j.attribute("gpus", plan.gpus);
  j.attribute("global_batch", plan.globalBatch);
  j.attribute("sequence_length", plan.sequenceLength);
  if (writesDims(plan))
    j.attributeObject("symbolic_dims", [&] {
      for (const auto &[name, value] : plan.symbolicDims)
        j.attribute(name, value);
    });
  if (plan.fusedAttention)
    j.attribute("fused_attention", true);
  if (!plan.contextReason.empty())
    j.attribute("context_reason", plan.contextReason);
  if (!plan.tensor2Reason.empty())
    j.attribute("tensor2_reason", plan.tensor2Reason);
  j.attribute("precision", bm::cost::toString(plan.precision));
  j.attribute("optimizer", bm::cost::toString(plan.optimizer));
}

/// The chosen configuration, its mesh and its stages.
static void writeConfigAndMesh(OStream &j, const Plan &plan) {
  j.attributeObject("config", [&] { writeConfig(j, plan.config); });
  j.attributeArray("mesh", [&] {
    for (auto [name, size] : {std::pair{kDataAxis, plan.config.dp},
                              std::pair{kTensorAxis, plan.config.tp},
                              std::pair{kPipelineAxis, plan.config.pp},
                              std::pair{kExpertAxis, plan.config.ep},
                              std::pair{kContextAxis, plan.config.cp},
                              std::pair{kTensor2Axis, plan.config.tp2}})
      if (!listedOnlyWhenSplit(name) || size > 1)
        j.object([&] {
          j.attribute("name", name);
          j.attribute("size", size);
        });
  });
  j.attributeArray("layers_per_stage", [&] {
    for (int layers : plan.layersPerStage)
      j.value(layers);
  });
}

/// The folded model: layers, unique blocks, experts.
static void writeModelShape(OStream &j, const Plan &plan) {
  j.attributeObject("fold", [&] {
    j.attribute("layers", plan.numLayers);
    j.attribute("unique_blocks", plan.numBlockClasses);
    j.attribute("attentions_per_block", plan.attentionsPerBlock);
  });
  if (plan.numExperts > 0)
    j.attributeObject("experts", [&] {
      j.attribute("count", plan.numExperts);
      j.attribute("router_top_k", plan.routerTopK);
      j.attributeArray("layers_per_block", [&] {
        for (bool expert : plan.expertLayersPerBlock)
          j.value(expert);
      });
    });
}

/// Every unique block's ops with their shardings.
static void writeBlocks(OStream &j, const Plan &plan) {
  j.attributeArray("blocks", [&] {
    for (const BlockSharding &block : plan.blocks)
      j.object([&] {
        j.attribute("name", block.name);
        j.attribute("block_class", block.blockClass);
        j.attribute("instances", block.numInstances);
        j.attributeArray("ops", [&] {
          for (const OpSharding &op : block.ops)
            j.object([&] {
              j.attribute("op", op.op);
              j.attribute("name", op.opName);
              j.attribute("label", op.label);
              j.attribute("rule", op.rule);
              j.attributeArray("factor_axes", [&] {
                for (const auto &[factor, axis] : op.factorAxes)
                  writeStrings(j, {factor, axis});
              });
              j.attributeArray("operands", [&] {
                for (const TensorSharding &t : op.operands)
                  writeTensor(j, t);
              });
              j.attributeArray("results", [&] {
                for (const TensorSharding &t : op.results)
                  writeTensor(j, t);
              });
            });
        });
      });
  });
}

/// The step: collectives, time, memory, items, timeline.
static void writeStep(OStream &j, const Plan &plan) {
  j.attributeArray("collectives", [&] {
    for (const CollectiveSummary &c : plan.collectives)
      j.object([&] {
        j.attribute("kind", c.kind);
        j.attribute("axis", c.axis);
        j.attribute("link", c.link);
        j.attribute("phase", c.phase);
        j.attribute("where", c.where);
        j.attribute("bytes", c.bytes);
        j.attribute("count_per_step", c.countPerStep);
        j.attribute("seconds", c.seconds);
        j.attribute("hidden_seconds", c.hiddenSeconds);
      });
  });
  j.attributeObject("time", [&] {
    j.attribute("step_seconds", plan.stepSeconds);
    writeTimeParts(j, plan.time);
  });
  j.attributeObject("memory", [&] {
    j.attribute("stage", plan.memory.stage);
    j.attribute("device_bytes", plan.deviceMemoryBytes);
    if (plan.hostMemoryBytes > 0)
      j.attribute("host_memory_bytes", plan.hostMemoryBytes);
    writeMemoryParts(j, plan.memory);
  });
  j.attribute("critical_stage", plan.criticalStage);
  j.attribute("tail_stage", plan.tailStage);
  j.attributeArray("items", [&] {
    for (const CostItem &item : plan.items)
      j.object([&] { writeItem(j, item); });
  });
  j.attributeArray("stage_memory", [&] {
    for (const MemoryBreakdown &stage : plan.stageMemory)
      j.object([&] {
        j.attribute("stage", stage.stage);
        writeMemoryParts(j, stage);
      });
  });
  if (!plan.stageForward.empty())
    j.attributeObject("stage_times", [&] {
      for (auto [key, times] : {std::pair{"forward", &plan.stageForward},
                                std::pair{"backward", &plan.stageBackward},
                                std::pair{"weight", &plan.stageWeight}})
        j.attributeArray(key, [&] {
          for (double seconds : *times)
            j.value(seconds);
        });
    });
  j.attributeArray("timeline", [&] {
    for (const TimelineBar &bar : plan.timeline)
      j.object([&] {
        j.attribute("kind", toString(bar.kind));
        j.attribute("rank", bar.rank);
        j.attribute("micro_batch", bar.microBatch);
        j.attribute("chunk", bar.chunk);
        j.attribute("start", bar.start);
        j.attribute("end", bar.end);
      });
  });
}

/// Throughput and how much the search scored.
static void writeThroughputAndSearch(OStream &j, const Plan &plan) {
  j.attributeObject("throughput", [&] {
    j.attribute("mfu", plan.mfu);
    j.attribute("hardware_tflops_per_gpu", plan.hardwareTflopsPerGpu);
    j.attribute("tokens_per_second", plan.tokensPerSecond);
    j.attribute("model_flops_per_step", plan.modelFlopsPerStep);
    j.attribute("tp_compute_split", plan.tpComputeSplit);
    j.attribute("distinct_work_gpus", plan.distinctWorkGpus());
  });
  j.attributeObject("search", [&] {
    j.attribute("configurations_evaluated", plan.configurationsEvaluated);
    j.attribute("block_searches", plan.blockSearches);
  });
}

/// The runner-ups and why each lost.
static void writeAlternatives(OStream &j, const Plan &plan) {
  j.attributeArray("alternatives", [&] {
    for (const Alternative &a : plan.alternatives)
      j.object([&] {
        j.attributeObject("config", [&] { writeConfig(j, a.config); });
        j.attribute("step_seconds", a.stepSeconds);
        j.attribute("memory_bytes", a.memoryBytes);
        j.attribute("fits", a.fits);
        j.attribute("reason", a.reason);
        j.attributeObject("time", [&] { writeTimeParts(j, a.time); });
      });
  });
}

void bm::plan::printPlanJson(const Plan &plan, llvm::raw_ostream &os) {
  OStream j(os, 2);
  j.object([&] {
    for (void (*write)(OStream &, const Plan &) :
         {writeRequest, writeConfigAndMesh, writeModelShape, writeBlocks,
          writeStep, writeThroughputAndSearch, writeAlternatives})
      write(j, plan);
  });
  os << "\n";
}

std::string bm::plan::planToJson(const Plan &plan) {
  std::string text;
  llvm::raw_string_ostream os(text);
  printPlanJson(plan, os);
  return text;
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

namespace {

/// Reads fields of one JSON object, remembering the first problem with its
/// path ("config.tp").
class Reader {
public:
  Reader(const llvm::json::Object *object, std::string path, std::string *error)
      : object_(object), path_(std::move(path)), error_(error) {}

  bool ok() const { return error_->empty(); }

  const llvm::json::Value *field(llvm::StringRef key) {
    if (!ok())
      return nullptr;
    const llvm::json::Value *value = object_ ? object_->get(key) : nullptr;
    if (!value)
      fail("missing '" + name(key) + "'");
    return value;
  }

  template <typename T> void integer(llvm::StringRef key, T &out) {
    if (const llvm::json::Value *v = field(key)) {
      if (std::optional<int64_t> i = v->getAsInteger())
        out = static_cast<T>(*i);
      else
        fail("'" + name(key) + "' must be an integer");
    }
  }
  /// Leaves `out` alone when the key is absent (keys added later).
  template <typename T> void optionalInteger(llvm::StringRef key, T &out) {
    if (object_ && object_->get(key))
      integer(key, out);
  }
  void number(llvm::StringRef key, double &out) {
    if (const llvm::json::Value *v = field(key)) {
      // 1e999 parses as infinity, which the writer could not write back.
      if (std::optional<double> d = v->getAsNumber(); d && std::isfinite(*d))
        out = *d;
      else
        fail("'" + name(key) + "' must be a finite number");
    }
  }
  /// Leaves `out` alone when the key is absent (keys added later).
  void optionalNumber(llvm::StringRef key, double &out) {
    if (object_ && object_->get(key))
      number(key, out);
  }
  void boolean(llvm::StringRef key, bool &out) {
    if (const llvm::json::Value *v = field(key)) {
      if (std::optional<bool> b = v->getAsBoolean())
        out = *b;
      else
        fail("'" + name(key) + "' must be true or false");
    }
  }
  void string(llvm::StringRef key, std::string &out) {
    if (const llvm::json::Value *v = field(key)) {
      if (std::optional<llvm::StringRef> s = v->getAsString())
        out = s->str();
      else
        fail("'" + name(key) + "' must be a string");
    }
  }
  /// Leave `out` alone when the key is absent (keys added later).
  void optionalString(llvm::StringRef key, std::string &out) {
    if (object_ && object_->get(key))
      string(key, out);
  }
  void optionalBoolean(llvm::StringRef key, bool &out) {
    if (object_ && object_->get(key))
      boolean(key, out);
  }
  /// An array of non-negative numbers.
  void seconds(llvm::StringRef key, std::vector<double> &out) {
    if (const llvm::json::Array *a = array(key))
      for (const llvm::json::Value &v : *a) {
        std::optional<double> d = v.getAsNumber();
        if (!d || !std::isfinite(*d) || *d < 0) {
          fail("'" + name(key) + "' must hold non-negative numbers");
          return;
        }
        out.push_back(*d);
      }
  }
  const llvm::json::Array *array(llvm::StringRef key) {
    const llvm::json::Value *v = field(key);
    if (!v)
      return nullptr;
    if (const llvm::json::Array *a = v->getAsArray())
      return a;
    fail("'" + name(key) + "' must be an array");
    return nullptr;
  }
  Reader object(llvm::StringRef key) {
    const llvm::json::Value *v = field(key);
    const llvm::json::Object *o = v ? v->getAsObject() : nullptr;
    if (v && !o)
      fail("'" + name(key) + "' must be an object");
    return Reader(o, name(key), error_);
  }
  Reader element(const llvm::json::Value &value, size_t index) {
    const llvm::json::Object *o = value.getAsObject();
    std::string path = path_ + "[" + std::to_string(index) + "]";
    if (!o && ok())
      *error_ = "'" + path + "' must be an object";
    return Reader(o, path, error_);
  }
  std::vector<std::string> strings(const llvm::json::Value &value,
                                   const std::string &what) {
    std::vector<std::string> result;
    const llvm::json::Array *a = value.getAsArray();
    if (!a) {
      fail("'" + what + "' must be an array of strings");
      return result;
    }
    for (const llvm::json::Value &item : *a) {
      if (std::optional<llvm::StringRef> s = item.getAsString())
        result.push_back(s->str());
      else
        fail("'" + what + "' must be an array of strings");
    }
    return result;
  }
  void fail(const std::string &message) {
    if (ok())
      *error_ = message;
  }
  std::string name(llvm::StringRef key) const {
    return path_.empty() ? key.str() : path_ + "." + key.str();
  }

private:
  const llvm::json::Object *object_;
  std::string path_;
  std::string *error_;
};

} // namespace

static void readConfig(Reader r, ParallelConfig &c) {
  r.integer("dp", c.dp);
  c.cp = 1;
  r.optionalInteger("cp", c.cp);
  std::string layout = "contiguous";
  r.optionalString("cp_layout", layout);
  if (layout != "contiguous" && layout != "mirrored")
    r.fail("'" + r.name("cp_layout") +
           "' must be contiguous or mirrored, got '" + layout + "'");
  c.cpMirrored = layout == "mirrored";
  c.ep = 1;
  r.optionalInteger("ep", c.ep);
  r.integer("tp", c.tp);
  c.tp2 = 1;
  r.optionalInteger("tp2", c.tp2);
  r.integer("pp", c.pp);
  r.integer("micro_batch", c.microBatch);
  r.integer("num_micro_batches", c.numMicroBatches);
  r.integer("zero_stage", c.zeroStage);
  r.integer("chunks", c.chunks);
  c.streamDim = -1;
  r.optionalInteger("stream_dim", c.streamDim);
  std::string recompute, schedule, stream = "replicated";
  r.string("recompute", recompute);
  r.string("schedule", schedule);
  r.optionalString("stream", stream);
  std::string offload = toString(Offload::None);
  r.optionalString("offload", offload);
  if (!r.ok())
    return;
  std::optional<Offload> parsed = parseOffload(offload);
  if (!parsed) {
    r.fail("'" + r.name("offload") + "' must be none or optimizer, got '" +
           offload + "'");
    return;
  }
  c.offload = *parsed;
  llvm::Expected<FixedChoices> fixed = parseFixedChoices(
      "recompute=" + recompute + ",schedule=" + schedule + ",stream=" + stream);
  if (!fixed) {
    r.fail(r.name("recompute/schedule/stream") + ": " +
           llvm::toString(fixed.takeError()));
    return;
  }
  c.recompute = *fixed->recompute;
  c.schedule = *fixed->schedule;
  c.stream = *fixed->stream;
}

static TensorSharding readTensor(Reader &parent, const llvm::json::Value &v,
                                 const std::string &path) {
  TensorSharding t;
  Reader r = parent.element(v, 0);
  if (!r.ok())
    return t;
  if (const llvm::json::Array *dims = r.array("dims"))
    for (const llvm::json::Value &dim : *dims)
      t.dims.push_back(r.strings(dim, path + ".dims"));
  if (const llvm::json::Value *partial = r.field("partial"))
    t.partialAxes = r.strings(*partial, path + ".partial");
  return t;
}

static void readTimeParts(Reader &r, TimeBreakdown &t) {
  r.number("compute", t.compute);
  r.number("nvlink", t.nvlink);
  r.number("network", t.network);
  r.number("bubble", t.bubble);
  r.optionalNumber("host_link", t.hostLink);
}

static void readMemoryParts(Reader &r, MemoryBreakdown &m) {
  r.integer("stage", m.stage);
  r.number("params", m.params);
  r.number("grads", m.grads);
  r.number("optimizer", m.optimizer);
  r.number("activations", m.activations);
  r.number("buffers", m.buffers);
  r.optionalNumber("host", m.host);
}

/// One of `names`' spellings (toString of the kinds), or a failure.
template <typename Kind, size_t N>
static Kind readKind(Reader &r, llvm::StringRef key,
                     const std::array<Kind, N> &kinds) {
  std::string text;
  r.string(key, text);
  std::vector<std::string> names;
  for (Kind kind : kinds) {
    if (text == toString(kind))
      return kind;
    names.push_back(toString(kind));
  }
  r.fail("'" + r.name(key) + "' must be one of " + llvm::join(names, ", "));
  return kinds[0];
}

static CostItem readItem(Reader &r) {
  CostItem item;
  item.kind =
      readKind(r, "kind",
               std::array{CostItem::Kind::Compute, CostItem::Kind::Collective,
                          CostItem::Kind::Transfer, CostItem::Kind::Bubble,
                          CostItem::Kind::HostCopy});
  r.string("what", item.what);
  r.string("axis", item.axis);
  r.string("link", item.link);
  r.string("phase", item.phase);
  r.string("where", item.where);
  r.integer("stage", item.stage);
  r.integer("devices", item.devices);
  r.number("bytes", item.bytes);
  r.integer("count", item.count);
  r.number("seconds", item.seconds);
  r.boolean("after_pipeline", item.afterPipeline);
  r.boolean("hidden", item.hidden);
  r.optionalNumber("hidden_seconds", item.hiddenSeconds);
  if (item.hiddenSeconds < 0)
    r.fail("'hidden_seconds' must not be negative");
  return item;
}

static TimelineBar readBar(Reader &r) {
  TimelineBar bar;
  bar.kind = readKind(
      r, "kind",
      std::array{TimelineBar::Kind::Forward, TimelineBar::Kind::Backward,
                 TimelineBar::Kind::WeightGrad, TimelineBar::Kind::Sync,
                 TimelineBar::Kind::Optimizer, TimelineBar::Kind::HostCopy});
  r.integer("rank", bar.rank);
  r.integer("micro_batch", bar.microBatch);
  r.integer("chunk", bar.chunk);
  r.number("start", bar.start);
  r.number("end", bar.end);
  return bar;
}

/// The keys added for `bmc report` (items, stage memory, timeline):
/// optional, as plans written before them have none.
/// `cluster_calibrated` and `cluster_calibration`, absent in plans written
/// before calibrated clusters.
static void readClusterCalibration(Reader &r, const llvm::json::Object &root,
                                   Plan &plan) {
  r.optionalBoolean("cluster_calibrated", plan.clusterCalibrated);
  if (!root.get("cluster_calibration"))
    return;
  Reader calibration = r.object("cluster_calibration");
  calibration.string("machine", plan.calibrationMachine);
  calibration.string("date", plan.calibrationDate);
}

static void readItemisation(Reader &r, const llvm::json::Object &root,
                            Plan &plan) {
  if (!root.get("items"))
    return;
  r.integer("critical_stage", plan.criticalStage);
  r.integer("tail_stage", plan.tailStage);
  if (const llvm::json::Array *items = r.array("items"))
    for (size_t i = 0; i < items->size() && r.ok(); ++i) {
      Reader ir = r.element((*items)[i], i);
      plan.items.push_back(readItem(ir));
    }
  if (const llvm::json::Array *stages = r.array("stage_memory"))
    for (size_t i = 0; i < stages->size() && r.ok(); ++i) {
      Reader sr = r.element((*stages)[i], i);
      MemoryBreakdown m;
      readMemoryParts(sr, m);
      plan.stageMemory.push_back(m);
    }
  if (const llvm::json::Array *bars = r.array("timeline"))
    for (size_t i = 0; i < bars->size() && r.ok(); ++i) {
      Reader br = r.element((*bars)[i], i);
      plan.timeline.push_back(readBar(br));
    }
  // Plans written before the stage times: the trainer's default costs.
  if (root.get("stage_times")) {
    Reader times = r.object("stage_times");
    times.seconds("forward", plan.stageForward);
    times.seconds("backward", plan.stageBackward);
    times.seconds("weight", plan.stageWeight);
  }
}

/// One op of a block: its rule, factor axes and tensor shardings.
static OpSharding readOpSharding(Reader &orr) {
  OpSharding op;
  orr.integer("op", op.op);
  orr.string("name", op.opName);
  orr.string("label", op.label);
  orr.string("rule", op.rule);
  if (const llvm::json::Array *axes = orr.array("factor_axes"))
    for (const llvm::json::Value &pair : *axes) {
      std::vector<std::string> items =
          orr.strings(pair, orr.name("factor_axes"));
      if (items.size() != 2) {
        orr.fail("'" + orr.name("factor_axes") +
                 "' must hold [factor, axis] pairs");
        break;
      }
      op.factorAxes.push_back({items[0], items[1]});
    }
  if (const llvm::json::Array *operands = orr.array("operands"))
    for (const llvm::json::Value &t : *operands)
      op.operands.push_back(readTensor(orr, t, orr.name("operands")));
  if (const llvm::json::Array *results = orr.array("results"))
    for (const llvm::json::Value &t : *results)
      op.results.push_back(readTensor(orr, t, orr.name("results")));
  return op;
}

/// What the plan is for: model, cluster, GPUs, batch, precision.
static void readRequest(Reader &r, const llvm::json::Object &root, Plan &plan) {
  r.string("model", plan.modelName);
  r.string("cluster", plan.clusterName);
  readClusterCalibration(r, root, plan);
  r.optionalNumber("grad_reduce_overlap", plan.gradReduceOverlap);
  if (plan.gradReduceOverlap < 0 || plan.gradReduceOverlap > 1)
    r.fail("'grad_reduce_overlap' must be from 0 to 1");
  r.integer("gpus", plan.gpus);
  r.integer("global_batch", plan.globalBatch);
  r.integer("sequence_length", plan.sequenceLength);
  r.optionalBoolean("fused_attention", plan.fusedAttention);
  r.optionalString("context_reason", plan.contextReason);
  r.optionalString("tensor2_reason", plan.tensor2Reason);
  // Optional: plans whose only symbolic dimension is "seq" (and plans
  // written before the key) have no `symbolic_dims`.
  if (root.get("symbolic_dims")) {
    r.object("symbolic_dims"); // fails unless an object
    if (const llvm::json::Object *object = root.getObject("symbolic_dims"))
      for (const auto &[key, value] : *object) {
        llvm::StringRef name = key;
        std::optional<int64_t> size = value.getAsInteger();
        if (name.empty())
          r.fail("'symbolic_dims' names a dimension with the empty string");
        else if (!size || *size < 0)
          r.fail("'symbolic_dims." + name.str() +
                 "' must be a non-negative integer");
        else
          plan.symbolicDims[name.str()] = *size;
      }
  }
  std::string precision, optimizer;
  r.string("precision", precision);
  r.string("optimizer", optimizer);
  if (r.ok()) {
    if (std::optional<Precision> parsed = bm::cost::parsePrecision(precision))
      plan.precision = *parsed;
    else
      r.fail("'precision' must be bf16, fp16 or fp32");
    if (std::optional<Optimizer> parsed = bm::cost::parseOptimizer(optimizer))
      plan.optimizer = *parsed;
    else
      r.fail("'optimizer' must be adam, sgd, lamb or lars");
  }
}

/// The configuration, its stages and the folded model.
static void readConfigAndShape(Reader &r, const llvm::json::Object &root,
                               Plan &plan) {
  readConfig(r.object("config"), plan.config);
  if (const llvm::json::Array *stages = r.array("layers_per_stage"))
    for (const llvm::json::Value &v : *stages) {
      if (std::optional<int64_t> layers = v.getAsInteger())
        plan.layersPerStage.push_back(static_cast<int>(*layers));
      else
        r.fail("'layers_per_stage' must hold integers");
    }
  Reader fold = r.object("fold");
  fold.integer("layers", plan.numLayers);
  fold.integer("unique_blocks", plan.numBlockClasses);
  fold.optionalInteger("attentions_per_block", plan.attentionsPerBlock);
  if (root.get("experts")) {
    Reader experts = r.object("experts");
    experts.integer("count", plan.numExperts);
    experts.integer("router_top_k", plan.routerTopK);
    if (const llvm::json::Array *layers = experts.array("layers_per_block"))
      for (const llvm::json::Value &v : *layers) {
        if (std::optional<bool> expert = v.getAsBoolean())
          plan.expertLayersPerBlock.push_back(*expert);
        else
          r.fail("'experts.layers_per_block' must hold booleans");
      }
  }
}

/// Every unique block's ops with their shardings.
static void readBlocks(Reader &r, Plan &plan) {
  if (const llvm::json::Array *blocks = r.array("blocks"))
    for (size_t b = 0; b < blocks->size() && r.ok(); ++b) {
      Reader br = r.element((*blocks)[b], b);
      BlockSharding block;
      br.string("name", block.name);
      br.integer("block_class", block.blockClass);
      br.integer("instances", block.numInstances);
      const llvm::json::Array *ops = br.array("ops");
      for (size_t o = 0; ops && o < ops->size() && r.ok(); ++o) {
        Reader orr = br.element((*ops)[o], o);
        block.ops.push_back(readOpSharding(orr));
      }
      plan.blocks.push_back(std::move(block));
    }
}

/// The step's collectives, summed.
static void readCollectives(Reader &r, Plan &plan) {
  if (const llvm::json::Array *collectives = r.array("collectives"))
    for (size_t i = 0; i < collectives->size() && r.ok(); ++i) {
      Reader cr = r.element((*collectives)[i], i);
      CollectiveSummary c;
      cr.string("kind", c.kind);
      cr.string("axis", c.axis);
      cr.string("link", c.link);
      cr.string("phase", c.phase);
      cr.string("where", c.where);
      cr.number("bytes", c.bytes);
      cr.integer("count_per_step", c.countPerStep);
      cr.number("seconds", c.seconds);
      cr.optionalNumber("hidden_seconds", c.hiddenSeconds);
      plan.collectives.push_back(c);
    }
}

/// Time, memory, items, throughput and search counts.
static void readStepTotals(Reader &r, const llvm::json::Object &root,
                           Plan &plan) {
  Reader time = r.object("time");
  time.number("step_seconds", plan.stepSeconds);
  readTimeParts(time, plan.time);
  Reader memory = r.object("memory");
  memory.number("device_bytes", plan.deviceMemoryBytes);
  memory.optionalNumber("host_memory_bytes", plan.hostMemoryBytes);
  readMemoryParts(memory, plan.memory);
  readItemisation(r, root, plan);
  Reader throughput = r.object("throughput");
  throughput.number("mfu", plan.mfu);
  throughput.number("hardware_tflops_per_gpu", plan.hardwareTflopsPerGpu);
  throughput.number("tokens_per_second", plan.tokensPerSecond);
  throughput.number("model_flops_per_step", plan.modelFlopsPerStep);
  // Plans written before it: tp taken to divide the work fully.
  plan.tpComputeSplit = plan.config.tp;
  throughput.optionalNumber("tp_compute_split", plan.tpComputeSplit);
  Reader search = r.object("search");
  search.integer("configurations_evaluated", plan.configurationsEvaluated);
  search.integer("block_searches", plan.blockSearches);
}

/// The runner-ups and why each lost.
static void readAlternatives(Reader &r, Plan &plan) {
  if (const llvm::json::Array *alternatives = r.array("alternatives"))
    for (size_t i = 0; i < alternatives->size() && r.ok(); ++i) {
      Reader ar = r.element((*alternatives)[i], i);
      Alternative a;
      readConfig(ar.object("config"), a.config);
      ar.number("step_seconds", a.stepSeconds);
      ar.number("memory_bytes", a.memoryBytes);
      ar.boolean("fits", a.fits);
      ar.string("reason", a.reason);
      if (const llvm::json::Object *o = (*alternatives)[i].getAsObject();
          o && o->get("time")) {
        Reader time = ar.object("time");
        readTimeParts(time, a.time);
      }
      plan.alternatives.push_back(a);
    }
}

llvm::Expected<Plan> bm::plan::parsePlanJson(llvm::StringRef text) {
  auto fail = [](const llvm::Twine &message) -> llvm::Error {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "plan: " + message);
  };
  // LLVM's JSON parser recurses per level; a plan nests about 6 deep.
  if (size_t depth = cost::measureText(text).depth; depth > 64)
    return fail("brackets nested " + llvm::Twine(depth) +
                " deep; a plan file nests a few levels");
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return fail("malformed JSON: " + llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return fail("expected a JSON object");
  std::optional<int64_t> version = root->getInteger("schema_version");
  if (!version)
    return fail("missing 'schema_version'");
  if (*version != Plan::kSchemaVersion)
    return fail(llvm::formatv("schema_version {0} is not supported (this "
                              "bmc reads version {1})",
                              *version, Plan::kSchemaVersion));
  std::string error;
  Reader r(root, "", &error);
  Plan plan;
  readRequest(r, *root, plan);
  readConfigAndShape(r, *root, plan);
  readBlocks(r, plan);
  readCollectives(r, plan);
  readStepTotals(r, *root, plan);
  readAlternatives(r, plan);
  if (!error.empty())
    return fail(error);
  if (std::optional<std::string> problem = inconsistency(plan))
    return fail("inconsistent numbers: " + *problem);
  return plan;
}

llvm::Expected<std::string> bm::plan::planToCheckedJson(const Plan &plan) {
  std::string json = planToJson(plan);
  llvm::Expected<Plan> back = parsePlanJson(json);
  if (!back)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "the plan for " + plan.config.str() +
            " would not read back (a planner bug): " +
            llvm::toString(back.takeError()));
  return json;
}
