//===- Subcommands.h - the `bmc` subcommands and their helpers -*- C++ -*-===//
//
// `bmc SUBCOMMAND ARGS...`: bmc.cpp dispatches on the first argument through
// a table; each subcommand lives in its own file (ImportCommand.cpp, ...)
// and parses its own arguments with the helpers below, so that adding one is
// a new file plus a table entry.
//
//===----------------------------------------------------------------------===//

#ifndef BMC_TOOLS_BMC_SUBCOMMANDS_H
#define BMC_TOOLS_BMC_SUBCOMMANDS_H

#include "import/OnnxImporter.h"
#include "passes/plan/TrainingConfig.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/Twine.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace bmc {

/// Runs a subcommand on its arguments (the subcommand name excluded) and
/// returns the process exit code.
using SubcommandFn = int (*)(llvm::ArrayRef<llvm::StringRef> args);

struct Subcommand {
  llvm::StringLiteral name;
  llvm::StringLiteral summary;
  SubcommandFn run;
};

int runCalibrate(llvm::ArrayRef<llvm::StringRef> args);
int runCompile(llvm::ArrayRef<llvm::StringRef> args);
int runExport(llvm::ArrayRef<llvm::StringRef> args);
int runImport(llvm::ArrayRef<llvm::StringRef> args);
int runPlan(llvm::ArrayRef<llvm::StringRef> args);
int runReport(llvm::ArrayRef<llvm::StringRef> args);

namespace report {
struct ReportInput;
} // namespace report

/// Writes the HTML report of `input` to `path` (`bmc report --html` and
/// `bmc plan --html`); 0, or fail()'s 1 when the file cannot be written.
int writeReportHtml(llvm::StringRef path, const report::ReportInput &input);

/// The path of a prebuilt tool beside this bmc (the build's bin/ or the
/// install's): bmrt-trainer, bmrt-calibrate.
std::string toolBesideBmc(llvm::StringRef name);

/// Prints "bmc: error: MESSAGE" on one line to stderr and returns 1.
int fail(const llvm::Twine &message);

/// Opens `path` ('-' is stdout), lets `write` fill it and keeps it; returns
/// 0, or fail()'s 1 with "cannot write 'PATH': REASON" if it cannot open.
int writeFile(llvm::StringRef path,
              llvm::function_ref<void(llvm::raw_ostream &)> write);

/// Reads a `--dim NAME=VALUE` value into `dims`; the error line otherwise.
std::optional<std::string> parseDim(llvm::StringRef text,
                                    std::map<std::string, int64_t> &dims);

/// Parses an integer flag value in [min, max]; `what` names it in `error`.
std::optional<int64_t> parseCount(llvm::StringRef text, llvm::StringRef what,
                                  std::string &error, int64_t min = 1,
                                  int64_t max = INT64_MAX);

/// The flags `bmc plan` and `bmc compile` share: what is planned for.
inline constexpr llvm::StringLiteral kPlanningFlags[] = {
    "--gpus",      "--cluster",   "--global-batch", "--seq",           "--dim",
    "--precision", "--optimizer", "--fix",          "--fuse-attention"};
/// Where the planning flags go.
struct PlanningRequest {
  bm::plan::TrainingConfig &training;
  bm::ImportOptions &import;
  std::string &cluster;
};
/// Applies `flag`, one of kPlanningFlags, with `value`; the error line
/// otherwise. Counts go from 1 to bm::cost::kLargestCount.
std::optional<std::string> applyPlanningFlag(llvm::StringRef flag,
                                             llvm::StringRef value,
                                             PlanningRequest &request);
/// kPlanningFlags and a subcommand's `own` flags, for ArgCursor.
std::vector<llvm::StringRef>
withPlanningFlags(llvm::ArrayRef<llvm::StringRef> own);

/// Walks a subcommand's arguments: flags with values (`--dim X`, `--dim=X`,
/// `-o X`), `--help`, positionals, and one clear error for anything else.
class ArgCursor {
public:
  ArgCursor(llvm::StringRef subcommand, llvm::ArrayRef<llvm::StringRef> args)
      : subcommand(subcommand), args(args) {}
  bool done() const { return index >= args.size(); }
  llvm::StringRef peek() const { return args[index]; }
  /// True if the current argument is `flag` (or `flag=...`); stores its
  /// value, taken from `=...` or the next argument. Reports a missing value.
  bool takeFlag(llvm::StringRef flag, std::optional<std::string> &value);
  /// The first of `flags` the current argument is (taking it and its value
  /// as takeFlag does), or an empty name.
  llvm::StringRef takeAnyFlag(llvm::ArrayRef<llvm::StringRef> flags,
                              std::optional<std::string> &value);
  /// True if the current argument is exactly `flag` (a switch).
  bool takeSwitch(llvm::StringRef flag);
  /// Takes the current argument as a positional.
  llvm::StringRef takePositional() { return args[index++]; }
  bool isOption() const {
    return peek().starts_with("-") && peek() != "-";
  }
  /// The error for an unknown option, naming the subcommand's help.
  int unknownOption() const;
  /// A flag took no value; set by takeFlag.
  std::optional<std::string> error;

private:
  llvm::StringRef subcommand;
  llvm::ArrayRef<llvm::StringRef> args;
  size_t index = 0;
};

} // namespace bmc

#endif // BMC_TOOLS_BMC_SUBCOMMANDS_H
