//===- bmc.cpp - the bmc driver: subcommand dispatch ----------------------===//
//
// `bmc calibrate|compile|export|import|plan|report ...`. Each subcommand
// is one entry in kSubcommands (alphabetical) and one file; errors reach
// the user as "bmc: error: ..." on one line with exit code 1.
//
//===----------------------------------------------------------------------===//

#include "tools/bmc/Subcommands.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace bmc;
using llvm::StringRef;

namespace {

// Alphabetical.
const Subcommand kSubcommands[] = {
    {"calibrate", "measure this machine into a cluster file (--cluster)",
     runCalibrate},
    {"compile", "plan, differentiate and build a trainer (OUT/trainer)",
     runCompile},
    {"export", "a checkpoint's trained weights back into the ONNX model",
     runExport},
    {"import", "ONNX model -> bm dialect MLIR, for inspection", runImport},
    {"plan", "search the parallel training plan for N GPUs", runPlan},
    {"report", "a plan file as text or as an HTML report (--html)",
     runReport},
};

constexpr StringRef kVersion = "0.1.0";

void printHelp(llvm::raw_ostream &os) {
  os << "bmc: automatic parallelism planner and compiler for training big "
        "models\n\n"
        "USAGE: bmc <subcommand> [options]\n\nSUBCOMMANDS:\n";
  for (const Subcommand &s : kSubcommands)
    os << "  " << llvm::left_justify(s.name, 10) << s.summary << "\n";
  os << "\nOPTIONS:\n"
        "  --help     print this help (also: bmc <subcommand> --help)\n"
        "  --version  print the version\n";
}

} // namespace

int bmc::fail(const llvm::Twine &message) {
  std::string text = message.str();
  // One line, whatever the message carried.
  for (char &c : text)
    if (c == '\n' || c == '\r')
      c = ' ';
  llvm::errs() << "bmc: error: " << text << "\n";
  return 1;
}

std::optional<std::string>
bmc::parseDim(StringRef text, std::map<std::string, int64_t> &dims) {
  auto [name, number] = text.split('=');
  int64_t size;
  if (name.empty() || number.getAsInteger(10, size))
    return "--dim expects NAME=VALUE with an integer VALUE, got '" +
           text.str() + "'";
  if (size < 0)
    return "--dim " + name.str() + " must not be negative, got " +
           number.str();
  dims[name.str()] = size;
  return std::nullopt;
}

std::string bmc::toolBesideBmc(StringRef name) {
  std::string self = llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&toolBesideBmc));
  llvm::SmallString<256> path = llvm::sys::path::parent_path(self);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

int bmc::writeFile(StringRef path,
                   llvm::function_ref<void(llvm::raw_ostream &)> write) {
  std::error_code ec;
  llvm::ToolOutputFile out(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return fail("cannot write '" + path + "': " + ec.message());
  write(out.os());
  out.keep();
  return 0;
}

bool ArgCursor::takeFlag(StringRef flag, std::optional<std::string> &value) {
  StringRef arg = peek();
  if (arg == flag) {
    if (index + 1 >= args.size()) {
      error = "option '" + flag.str() + "' needs a value";
      ++index;
      return true;
    }
    value = args[index + 1].str();
    index += 2;
    return true;
  }
  if (arg.starts_with(flag) && arg.drop_front(flag.size()).starts_with("=")) {
    value = arg.drop_front(flag.size() + 1).str();
    ++index;
    return true;
  }
  return false;
}

StringRef ArgCursor::takeAnyFlag(llvm::ArrayRef<StringRef> flags,
                                 std::optional<std::string> &value) {
  for (StringRef flag : flags)
    if (takeFlag(flag, value))
      return flag;
  return {};
}

bool ArgCursor::takeSwitch(StringRef flag) {
  if (peek() != flag)
    return false;
  ++index;
  return true;
}

int ArgCursor::unknownOption() const {
  return fail("unknown option '" + peek() + "' for 'bmc " + subcommand +
              "'; see 'bmc " + subcommand + " --help'");
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  std::vector<StringRef> args(argv + 1, argv + argc);
  if (args.empty()) {
    printHelp(llvm::errs());
    return 1;
  }
  StringRef first = args.front();
  if (first == "--help" || first == "-h" || first == "help") {
    printHelp(llvm::outs());
    return 0;
  }
  if (first == "--version") {
    llvm::outs() << "bmc " << kVersion << " (MLIR/LLVM " LLVM_VERSION_STRING
                    ")\n";
    return 0;
  }
  for (const Subcommand &s : kSubcommands)
    if (s.name == first)
      return s.run(llvm::ArrayRef(args).drop_front());
  if (first.starts_with("-"))
    return fail("unknown option '" + first + "'; see 'bmc --help'");
  std::string names;
  for (const Subcommand &s : kSubcommands)
    names += (names.empty() ? "" : ", ") + s.name.str();
  return fail("unknown subcommand '" + first + "' (subcommands: " + names +
              "); see 'bmc --help'");
}
