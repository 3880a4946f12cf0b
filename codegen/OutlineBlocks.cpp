//===- OutlineBlocks.cpp - one function per block class -------------------===//

#include "codegen/OutlineBlocks.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace bm {
namespace {

using bmrt::Instr;
using bmrt::Program;

/// Consecutive instructions of one layer.
struct Run {
  int layer, blockClass, occurrence;
  size_t begin, end;
};

std::vector<Run> findRuns(const Program &program) {
  std::vector<Run> runs;
  std::map<int, int> seen;
  const auto &instrs = program.instrs;
  for (size_t i = 0; i < instrs.size();) {
    size_t j = i + 1;
    if (instrs[i].layer < 0) {
      i = j;
      continue;
    }
    // A pipeline stage's forward and backward run apart: no run spans both.
    while (j < instrs.size() && instrs[j].layer == instrs[i].layer &&
           static_cast<int>(j) != program.backwardStart)
      ++j;
    runs.push_back({instrs[i].layer, instrs[i].blockClass,
                    seen[instrs[i].layer]++, i, j});
    i = j;
  }
  return runs;
}

/// What a run reads from outside (its arguments), computes (its internals)
/// and hands on (its results), and a signature that two runs doing the same
/// computation on other slots share.
struct RunShape {
  std::vector<int> args, internals, results;
  std::string signature;
};

std::string attrText(const bmrt::Attr &attr) {
  std::ostringstream os;
  switch (attr.kind) {
  case bmrt::Attr::Kind::Int:
    os << attr.i;
    break;
  case bmrt::Attr::Kind::Float:
    os.precision(17);
    os << attr.f;
    break;
  case bmrt::Attr::Kind::Ints:
    for (int64_t v : attr.ints)
      os << v << ',';
    break;
  case bmrt::Attr::Kind::String:
    os << '"' << attr.s << '"';
    break;
  }
  return os.str();
}

std::string slotText(const bmrt::Slot &slot) {
  return std::string(bmrt::nameOf(slot.dtype)) + bmrt::formatShape(slot.shape);
}

/// `readers[s]`: the instructions that read slot s; a value computed in the
/// run and read outside it is one of the run's results.
RunShape shapeOf(const Program &program, const Run &run,
                 const std::vector<std::vector<size_t>> &readers) {
  RunShape shape;
  std::map<int, int> local;
  auto localOf = [&](int slot) {
    auto it = local.find(slot);
    if (it != local.end())
      return it->second;
    int index = static_cast<int>(local.size());
    local[slot] = index;
    return index;
  };
  std::set<int> computed;
  std::ostringstream body;
  // Arguments are numbered by first read; they must all be numbered before
  // the internals, so read the run twice.
  for (size_t t = run.begin; t < run.end; ++t) {
    for (int o : program.instrs[t].operands)
      if (o >= 0 && !computed.count(o) && !local.count(o)) {
        shape.args.push_back(o);
        localOf(o);
      }
    for (int r : program.instrs[t].results)
      computed.insert(r);
  }
  for (size_t t = run.begin; t < run.end; ++t) {
    const Instr &instr = program.instrs[t];
    body << instr.op;
    for (const auto &[key, value] : instr.attrs)
      body << ' ' << key << '=' << attrText(value);
    for (int o : instr.operands)
      body << " %" << (o < 0 ? -1 : localOf(o));
    body << " ->";
    for (int r : instr.results) {
      shape.internals.push_back(r);
      body << " %" << localOf(r);
    }
    body << '\n';
  }
  auto usedOutside = [&](int slot) {
    if (slot == program.loss ||
        program.slots[slot].kind == bmrt::SlotKind::Grad)
      return true;
    for (const std::vector<int> *read :
         {&program.outputs, &program.sends, &program.sendGrads})
      if (std::find(read->begin(), read->end(), slot) != read->end())
        return true;
    for (size_t reader : readers[slot])
      if (reader < run.begin || reader >= run.end)
        return true;
    return false;
  };
  for (int slot : shape.internals)
    if (usedOutside(slot))
      shape.results.push_back(slot);
  std::ostringstream signature;
  signature << run.blockClass << '/' << run.occurrence << '\n';
  for (int a : shape.args)
    signature << slotText(program.slots[a]) << ' ';
  signature << '\n';
  for (int i : shape.internals)
    signature << slotText(program.slots[i]) << ' ';
  signature << "\nresults";
  for (int r : shape.results)
    signature << ' ' << local[r];
  signature << '\n' << body.str();
  shape.signature = signature.str();
  return shape;
}

std::string functionName(const Run &run, int duplicate) {
  std::string phase = run.occurrence == 0   ? "forward"
                      : run.occurrence == 1 ? "backward"
                                            : "part" + std::to_string(run.occurrence);
  std::string name = "block" + std::to_string(run.blockClass) + "_" + phase;
  return duplicate ? name + "_" + std::to_string(duplicate + 1) : name;
}

bmrt::Function makeFunction(const Program &program, const Run &run,
                            const RunShape &shape, std::string name) {
  bmrt::Function function;
  function.name = std::move(name);
  std::map<int, int> local;
  auto add = [&](int slot) {
    local[slot] = static_cast<int>(function.slots.size());
    bmrt::Slot s = program.slots[slot];
    s.kind = bmrt::SlotKind::Value;
    // `frozen` is a parameter's mark; the function's argument is a value
    // (the text form refuses it on anything else).
    s.frozen = false;
    s.name.clear();
    s.data.clear();
    // A call binds the caller's slot, sharding and all.
    s.sharding.clear();
    s.partial.clear();
    s.model.clear();
    function.slots.push_back(std::move(s));
  };
  for (int a : shape.args)
    add(a);
  function.numArgs = static_cast<int>(shape.args.size());
  for (int i : shape.internals)
    add(i);
  for (size_t t = run.begin; t < run.end; ++t) {
    Instr instr = program.instrs[t];
    for (int &o : instr.operands)
      if (o >= 0)
        o = local.at(o);
    for (int &r : instr.results)
      r = local.at(r);
    function.instrs.push_back(std::move(instr));
  }
  for (int r : shape.results)
    function.results.push_back(local.at(r));
  return function;
}

} // namespace

void compactSlots(Program &program) {
  std::vector<bool> keep(program.slots.size(), false);
  for (size_t i = 0; i < program.slots.size(); ++i)
    keep[i] = program.slots[i].kind != bmrt::SlotKind::Value &&
              program.slots[i].kind != bmrt::SlotKind::Const;
  for (const Instr &instr : program.instrs) {
    for (int o : instr.operands)
      if (o >= 0)
        keep[o] = true;
    for (int r : instr.results)
      keep[r] = true;
  }
  if (program.loss >= 0)
    keep[program.loss] = true;
  for (const std::vector<int> *kept :
       {&program.outputs, &program.sends, &program.sendGrads})
    for (int o : *kept)
      keep[o] = true;
  std::vector<int> renumber(program.slots.size(), -1);
  std::vector<bmrt::Slot> slots;
  for (size_t i = 0; i < program.slots.size(); ++i)
    if (keep[i]) {
      renumber[i] = static_cast<int>(slots.size());
      slots.push_back(std::move(program.slots[i]));
    }
  program.slots = std::move(slots);
  for (Instr &instr : program.instrs) {
    for (int &o : instr.operands)
      if (o >= 0)
        o = renumber[o];
    for (int &r : instr.results)
      r = renumber[r];
  }
  if (program.loss >= 0)
    program.loss = renumber[program.loss];
  for (std::vector<int> *kept :
       {&program.outputs, &program.sends, &program.sendGrads})
    for (int &o : *kept)
      o = renumber[o];
}

void outlineBlocks(Program &program) {
  std::vector<std::vector<size_t>> readers(program.slots.size());
  for (size_t t = 0; t < program.instrs.size(); ++t)
    for (int o : program.instrs[t].operands)
      if (o >= 0)
        readers[o].push_back(t);
  std::vector<Run> runs = findRuns(program);
  std::vector<RunShape> shapes;
  std::map<std::string, int> count;
  for (const Run &run : runs) {
    shapes.push_back(shapeOf(program, run, readers));
    ++count[shapes.back().signature];
  }
  // A function for each signature that two or more runs share.
  std::map<std::string, std::string> functionOf;
  std::map<std::string, int> names;
  std::map<size_t, size_t> callAt; // run begin -> run index
  for (size_t r = 0; r < runs.size(); ++r) {
    const std::string &signature = shapes[r].signature;
    if (count[signature] < 2)
      continue;
    if (!functionOf.count(signature)) {
      std::string base = functionName(runs[r], 0);
      std::string name = functionName(runs[r], names[base]++);
      program.functions.push_back(
          makeFunction(program, runs[r], shapes[r], name));
      functionOf[signature] = name;
    }
    callAt[runs[r].begin] = r;
  }
  if (callAt.empty())
    return;
  std::vector<Instr> instrs;
  int backwardStart = program.backwardStart;
  for (size_t t = 0; t < program.instrs.size();) {
    if (static_cast<int>(t) == program.backwardStart)
      backwardStart = static_cast<int>(instrs.size());
    auto it = callAt.find(t);
    if (it == callAt.end()) {
      instrs.push_back(std::move(program.instrs[t++]));
      continue;
    }
    const Run &run = runs[it->second];
    const RunShape &shape = shapes[it->second];
    Instr call;
    call.op = "call";
    call.attrs["callee"].kind = bmrt::Attr::Kind::String;
    call.attrs["callee"].s = functionOf[shape.signature];
    call.operands = shape.args;
    call.results = shape.results;
    call.comment = "layer " + std::to_string(run.layer);
    instrs.push_back(std::move(call));
    t = run.end;
  }
  program.instrs = std::move(instrs);
  program.backwardStart = backwardStart;
  compactSlots(program);
}

} // namespace bm
