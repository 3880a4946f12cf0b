//===- ExportCommand.cpp - `bmc export CKPT -o trained.onnx` --------------===//
//
// Writes the ONNX model a checkpoint was trained from with the trained
// weights in place of its initializers: the same graph, opset and names, so
// any ONNX tool runs the result. The checkpoint's manifest names the model
// file (and its SHA-256, which must match); weights above 1 GiB go to
// external data beside the output, as ONNX's own exporter does for large
// models (protobuf messages stop at 2 GiB).
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"

#include "import/OnnxLoader.h"
#include "runtime/checkpoint/Checkpoint.h"

#include "bmrt/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <fstream>

using namespace bmc;
using llvm::StringRef;

namespace {

constexpr StringRef kHelp = R"(USAGE: bmc export CKPT_DIR -o trained.onnx [--model MODEL.onnx] [--external-data]

Writes the ONNX model that the checkpoint in CKPT_DIR was trained from, with
the checkpoint's parameters as its initializers. The model is the file the
checkpoint's manifest names (where `bmc compile` read it), or --model; its
SHA-256 must be the one the checkpoint was trained from. Weights larger than
1 GiB in all go to external data, trained.onnx.data beside the output.

OPTIONS:
  -o FILE          the ONNX file to write (required)
  --model FILE     the original model, if it has moved since compiling
  --external-data  write the weights to trained.onnx.data whatever their size
  --help           print this help
)";

/// Above this, initializers go to external data: a protobuf message must
/// stay under 2 GiB.
constexpr uint64_t kLargestInlineBytes = uint64_t(1) << 30;

llvm::Expected<std::string> sha256Of(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return llvm::createStringError("cannot read the model '" + path +
                                   "': " + buffer.getError().message());
  llvm::SHA256 hasher;
  hasher.update(llvm::arrayRefFromStringRef((*buffer)->getBuffer()));
  return llvm::toHex(hasher.final(), /*LowerCase=*/true);
}

/// Puts `tensor`'s values into `init`, inline or at `offset` of the
/// external data file `dataName`.
void setInitializer(onnx::TensorProto &init, const bmrt::HostTensor &tensor,
                    bool external, const std::string &dataName,
                    uint64_t offset) {
  init.clear_float_data();
  init.clear_raw_data();
  init.clear_external_data();
  if (!external) {
    init.set_data_location(onnx::TensorProto::DEFAULT);
    init.set_raw_data(tensor.data.data(), tensor.data.size());
    return;
  }
  init.set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char *key, const std::string &value) {
    auto *entry = init.add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  };
  add("location", dataName);
  add("offset", std::to_string(offset));
  add("length", std::to_string(tensor.data.size()));
}

/// Replaces every initializer the checkpoint trained; fails on a parameter
/// the model does not have or of another shape.
llvm::Error replaceInitializers(onnx::ModelProto &model,
                                const bmrt::Checkpoint &checkpoint,
                                const std::string &output,
                                bool forceExternal) {
  uint64_t total = 0;
  for (const bmrt::HostTensor &t : checkpoint.parameters)
    total += t.data.size();
  bool external = forceExternal || total > kLargestInlineBytes;
  std::string dataName = llvm::sys::path::filename(output).str() + ".data";
  std::ofstream data;
  if (external) {
    llvm::SmallString<256> dataPath = llvm::sys::path::parent_path(output);
    llvm::sys::path::append(dataPath, dataName);
    data.open(std::string(dataPath), std::ios::binary | std::ios::trunc);
    if (!data)
      return llvm::createStringError("cannot write '" + dataPath + "'");
  }
  std::map<std::string, onnx::TensorProto *> byName;
  for (onnx::TensorProto &init : *model.mutable_graph()->mutable_initializer())
    byName[init.name()] = &init;
  uint64_t offset = 0;
  for (const bmrt::HostTensor &t : checkpoint.parameters) {
    // A diverged run's weights are no model: refuse them before writing.
    int64_t bad = bmrt::firstNonFinite(t.data.data(), t.dtype,
                                       bmrt::numElements(t.shape));
    if (bad >= 0)
      return llvm::createStringError(
          "checkpoint parameter '" + t.name + "' holds a non-finite value " +
          "(element " + std::to_string(bad) + "); not exporting it");
    auto it = byName.find(t.name);
    if (it == byName.end())
      return llvm::createStringError("the model has no initializer '" +
                                     t.name + "' that the checkpoint holds");
    std::vector<int64_t> dims(it->second->dims().begin(),
                              it->second->dims().end());
    // A parameter trained in a factored view ([64, 192] as [64, 3, 64]) is
    // the model's tensor, elements in the same order.
    if (!bmrt::sameElementOrder(dims, t.shape) ||
        it->second->data_type() != onnx::TensorProto::FLOAT)
      return llvm::createStringError(
          "initializer '" + t.name + "' of the model is not f32" +
          bmrt::formatShape(dims) + " like the checkpoint's " +
          bmrt::formatShape(t.shape));
    setInitializer(*it->second, t, external, dataName, offset);
    if (external) {
      data.write(reinterpret_cast<const char *>(t.data.data()), t.data.size());
      offset += t.data.size();
    }
  }
  if (external && !data.flush())
    return llvm::createStringError("cannot write the external data of '" +
                                   output + "'");
  return llvm::Error::success();
}

struct ExportArgs {
  std::string checkpoint, output, model;
  bool externalData = false;
};

std::optional<int> parseArgs(llvm::ArrayRef<StringRef> args, ExportArgs &out) {
  ArgCursor cursor("export", args);
  while (!cursor.done()) {
    if (cursor.takeSwitch("--help") || cursor.takeSwitch("-h")) {
      llvm::outs() << kHelp;
      return 0;
    }
    if (cursor.takeSwitch("--external-data")) {
      out.externalData = true;
      continue;
    }
    std::optional<std::string> value;
    std::string *target = nullptr;
    if (cursor.takeFlag("-o", value))
      target = &out.output;
    else if (cursor.takeFlag("--model", value))
      target = &out.model;
    if (target) {
      if (cursor.error)
        return fail(*cursor.error);
      *target = *value;
      continue;
    }
    if (cursor.isOption())
      return cursor.unknownOption();
    if (!out.checkpoint.empty())
      return fail("bmc export takes one checkpoint folder, got '" +
                  out.checkpoint + "' and '" + cursor.peek() + "'");
    out.checkpoint = cursor.takePositional().str();
  }
  if (out.checkpoint.empty())
    return fail("bmc export needs a checkpoint folder; see 'bmc export --help'");
  if (out.output.empty())
    return fail("bmc export needs an output file: -o trained.onnx");
  return std::nullopt;
}

int exportCheckpoint(const ExportArgs &args,
                     const bmrt::CheckpointVersion &version) {
  bmrt::CheckpointInfo info = bmrt::readCheckpointInfo(version);
  std::string modelPath = args.model.empty() ? info.modelPath : args.model;
  if (modelPath.empty())
    return fail("checkpoint '" + args.checkpoint +
                "' does not name its model file; pass --model MODEL.onnx");
  llvm::Expected<std::string> hash = sha256Of(modelPath);
  if (!hash)
    return fail(llvm::toString(hash.takeError()));
  if (*hash != info.modelHash)
    return fail("checkpoint '" + args.checkpoint + "' is of model '" +
                info.model + "' (hash " + info.modelHash + "), but '" +
                modelPath + "' has hash " + *hash);
  bmrt::Checkpoint checkpoint =
      bmrt::loadCheckpoint(version, info.model, info.modelHash);
  auto model = bm::loadOnnxModel(modelPath);
  if (!model)
    return fail(llvm::toString(model.takeError()));
  if (llvm::Error err = replaceInitializers(**model, checkpoint, args.output,
                                           args.externalData))
    return fail(llvm::toString(std::move(err)));
  std::ofstream out(args.output, std::ios::binary | std::ios::trunc);
  if (!out || !(*model)->SerializeToOstream(&out) || !out.flush())
    return fail("cannot write '" + args.output + "'");
  llvm::outs() << "exported " << info.model << " at step " << info.step
               << " (" << checkpoint.parameters.size()
               << " parameter tensors) to " << args.output << "\n";
  return 0;
}

} // namespace

int bmc::runExport(llvm::ArrayRef<StringRef> args) {
  ExportArgs exportArgs;
  if (std::optional<int> exit = parseArgs(args, exportArgs))
    return *exit;
  try {
    // One version, resolved once: read again only if it was pruned.
    int status = 0;
    bmrt::withCheckpointVersion(
        exportArgs.checkpoint, [&](const bmrt::CheckpointVersion &version) {
          status = exportCheckpoint(exportArgs, version);
        });
    return status;
  } catch (const bmrt::Error &e) {
    return fail(e.what());
  }
}
