//===- ImportCommand.cpp - `bmc import MODEL.onnx` ------------------------===//
//
// Prints the bm dialect of an ONNX model, for inspection (phase 1 alone).
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"

#include "import/OnnxImporter.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

using namespace bmc;
using llvm::StringRef;

namespace {

constexpr StringRef kHelp = R"(USAGE: bmc import MODEL.onnx [options]

Imports an ONNX model (opsets 13 to 21) into the bm dialect and prints it.
Parameters become arguments of func.func @main; shape computations fold.
External weight data is never read and may be absent.

OPTIONS:
  --dim NAME=VALUE   bind the symbolic dimension NAME (repeatable); wins over
                     the model's "bm.dim.NAME" metadata
  --no-model-dims    ignore the model's "bm.dim.NAME" metadata
  --locations        print each op's location (its ONNX node name)
  -o FILE            write the module to FILE (default: stdout)
  --help             print this help
)";

} // namespace

int bmc::runImport(llvm::ArrayRef<StringRef> args) {
  ArgCursor cursor("import", args);
  bm::ImportOptions options;
  std::optional<std::string> model, output;
  bool locations = false;
  while (!cursor.done()) {
    std::optional<std::string> value;
    if (cursor.takeSwitch("--help") || cursor.takeSwitch("-h")) {
      llvm::outs() << kHelp;
      return 0;
    }
    if (cursor.takeSwitch("--locations")) {
      locations = true;
      continue;
    }
    if (cursor.takeSwitch("--no-model-dims")) {
      options.useModelDefaults = false;
      continue;
    }
    if (cursor.takeFlag("--dim", value) || cursor.takeFlag("-dim", value)) {
      if (cursor.error)
        return fail(*cursor.error);
      if (std::optional<std::string> error = parseDim(*value, options.dims))
        return fail(*error);
      continue;
    }
    if (cursor.takeFlag("-o", value) || cursor.takeFlag("--output", value)) {
      if (cursor.error)
        return fail(*cursor.error);
      output = *value;
      continue;
    }
    if (cursor.isOption())
      return cursor.unknownOption();
    StringRef positional = cursor.takePositional();
    if (model)
      return fail("bmc import takes one model, got '" + *model + "' and '" +
                  positional + "'");
    model = positional.str();
  }
  if (!model)
    return fail("bmc import needs a model file; see 'bmc import --help'");

  mlir::MLIRContext context;
  auto module = bm::importOnnxFile(context, *model, options);
  if (!module)
    return fail(llvm::toString(module.takeError()));

  mlir::OpPrintingFlags flags;
  if (locations)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/false);
  return writeFile(output.value_or("-"), [&](llvm::raw_ostream &os) {
    (*module)->print(os, flags);
    os << "\n";
  });
}
