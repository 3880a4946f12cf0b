//===- ProgramText.cpp - printing and parsing step programs ---------------===//
//
// The grammar, one statement per line ('#' starts a comment):
//
//   bmc-step-program VERSION
//   model NAME
//   mesh AXIS=SIZE ...                                  (optional)
//   slot %N KIND DTYPE[D0,D1,...] ["NAME"] [= V V V ...]
//        [frozen]  (a parameter a training step gives no gradient)
//        [sharding=[["AXIS",...],...]] [partial=["AXIS",...]]
//        [model=[D,...]]  (a parameter stored in a factored view of the
//                          model's shape: the same elements in order)
//   %R[, %R...] = OP [%A|_ [, ...]] [{KEY=VALUE, ...}] [# COMMENT]
//   loss %N [partial=["AXIS",...]]   (or, forward only: output %N)
//
// VALUE is an integer, a float (with '.', 'e', "inf" or "nan"), a list
// [1,2,3] or a "string". Floats print with 9 significant digits, which
// round-trips every fp32 value.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "bmrt/Program.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

namespace bmrt {

const char *nameOf(SlotKind kind) {
  switch (kind) {
  case SlotKind::Input:
    return "input";
  case SlotKind::Label:
    return "label";
  case SlotKind::Param:
    return "param";
  case SlotKind::Grad:
    return "grad";
  case SlotKind::Const:
    return "const";
  case SlotKind::Value:
    return "value";
  case SlotKind::Activation:
    return "activation";
  case SlotKind::ActivationGrad:
    return "activation_grad";
  }
  return "?";
}

static bool parseSlotKind(const std::string &name, SlotKind &kind) {
  for (SlotKind k : {SlotKind::Input, SlotKind::Label, SlotKind::Param,
                     SlotKind::Grad, SlotKind::Const, SlotKind::Value,
                     SlotKind::Activation, SlotKind::ActivationGrad})
    if (name == nameOf(k)) {
      kind = k;
      return true;
    }
  return false;
}

//===----------------------------------------------------------------------===//
// Instr and Program accessors
//===----------------------------------------------------------------------===//

static const Attr &attrOf(const Instr &instr, const std::string &name,
                          Attr::Kind kind) {
  auto it = instr.attrs.find(name);
  BMRT_CHECK(it != instr.attrs.end(),
             "'" + instr.op + "' has no attribute '" + name + "'");
  BMRT_CHECK(it->second.kind == kind,
             "attribute '" + name + "' of '" + instr.op + "' has another type");
  return it->second;
}

int64_t Instr::getInt(const std::string &name) const {
  return attrOf(*this, name, Attr::Kind::Int).i;
}

int64_t Instr::getInt(const std::string &name, int64_t otherwise) const {
  return attrs.count(name) ? getInt(name) : otherwise;
}

double Instr::getFloat(const std::string &name) const {
  auto it = attrs.find(name);
  // An integral float attribute may have been printed as an integer.
  if (it != attrs.end() && it->second.kind == Attr::Kind::Int)
    return static_cast<double>(it->second.i);
  return attrOf(*this, name, Attr::Kind::Float).f;
}

const std::vector<int64_t> &Instr::getInts(const std::string &name) const {
  return attrOf(*this, name, Attr::Kind::Ints).ints;
}

const std::string &Instr::getString(const std::string &name) const {
  return attrOf(*this, name, Attr::Kind::String).s;
}

std::vector<int> Program::slotsOf(SlotKind kind) const {
  std::vector<int> found;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].kind == kind)
      found.push_back(static_cast<int>(i));
  return found;
}

int Program::meshAxisSize(const std::string &name) const {
  for (const MeshAxis &axis : mesh)
    if (axis.name == name)
      return axis.size;
  return 1;
}

int Program::gradientOf(int param) const {
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].kind == SlotKind::Grad && slots[i].name == slots[param].name)
      return static_cast<int>(i);
  return -1;
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

static std::string formatFloat(double value) {
  if (std::isnan(value))
    return "nan";
  if (std::isinf(value))
    return value > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  std::string s = text;
  // Keep floats recognisable as floats.
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

static std::string quote(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

static std::string formatAttr(const Attr &attr) {
  switch (attr.kind) {
  case Attr::Kind::Int:
    return std::to_string(attr.i);
  case Attr::Kind::Float:
    return formatFloat(attr.f);
  case Attr::Kind::Ints: {
    std::string text = "[";
    for (size_t i = 0; i < attr.ints.size(); ++i)
      text += (i ? "," : "") + std::to_string(attr.ints[i]);
    return text + "]";
  }
  case Attr::Kind::String:
    return quote(attr.s);
  }
  return "";
}

static void printConstant(std::ostream &os, const Slot &slot) {
  os << " =";
  int64_t n = numElements(slot.shape);
  const uint8_t *data = slot.data.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (slot.dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, data + 4 * i, 4);
      os << ' ' << formatFloat(v);
      break;
    }
    case DType::I64: {
      int64_t v;
      std::memcpy(&v, data + 8 * i, 8);
      os << ' ' << v;
      break;
    }
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, data + 4 * i, 4);
      os << ' ' << v;
      break;
    }
    case DType::Bool:
      os << ' ' << int(data[i] != 0);
      break;
    }
  }
}

static void printInstr(std::ostream &os, const Instr &instr) {
  for (size_t i = 0; i < instr.results.size(); ++i)
    os << (i ? ", %" : "%") << instr.results[i];
  os << " = " << instr.op;
  for (size_t i = 0; i < instr.operands.size(); ++i) {
    os << (i ? ", " : " ");
    if (instr.operands[i] < 0)
      os << '_';
    else
      os << '%' << instr.operands[i];
  }
  if (!instr.attrs.empty()) {
    os << " {";
    bool first = true;
    for (const auto &[key, value] : instr.attrs) {
      os << (first ? "" : ", ") << key << '=' << formatAttr(value);
      first = false;
    }
    os << '}';
  }
  if (!instr.comment.empty())
    os << "  # " << instr.comment;
  os << '\n';
}

/// ["dp","tp"].
static std::string formatNames(const std::vector<std::string> &names) {
  std::string text = "[";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i ? "," : "") + quote(names[i]);
  return text + "]";
}

static void printSlot(std::ostream &os, size_t index, const Slot &slot) {
  os << "slot %" << index << ' ' << nameOf(slot.kind) << ' '
     << nameOf(slot.dtype) << formatShape(slot.shape);
  if (!slot.name.empty())
    os << ' ' << quote(slot.name);
  if (slot.frozen)
    os << " frozen";
  if (!slot.sharding.empty()) {
    os << " sharding=[";
    for (size_t d = 0; d < slot.sharding.size(); ++d)
      os << (d ? "," : "") << formatNames(slot.sharding[d]);
    os << ']';
  }
  if (!slot.partial.empty())
    os << " partial=" << formatNames(slot.partial);
  if (!slot.model.empty())
    os << " model=" << formatShape(slot.model);
  if (slot.kind == SlotKind::Const)
    printConstant(os, slot);
  os << '\n';
}

static void printFunction(std::ostream &os, const Function &function) {
  os << "func " << function.name << ' ' << function.numArgs << " ->";
  for (size_t i = 0; i < function.results.size(); ++i)
    os << (i ? ", %" : " %") << function.results[i];
  os << '\n';
  for (size_t i = 0; i < function.slots.size(); ++i)
    printSlot(os, i, function.slots[i]);
  for (const Instr &instr : function.instrs)
    printInstr(os, instr);
  os << "end\n\n";
}

std::string printProgram(const Program &program) {
  std::ostringstream os;
  os << "bmc-step-program " << Program::kVersion << '\n';
  os << "model " << quote(program.model) << '\n';
  if (!program.mesh.empty()) {
    os << "mesh";
    for (const MeshAxis &axis : program.mesh)
      os << ' ' << axis.name << '=' << axis.size;
    os << '\n';
  }
  os << '\n';
  for (size_t i = 0; i < program.slots.size(); ++i)
    printSlot(os, i, program.slots[i]);
  os << '\n';
  for (const Function &function : program.functions)
    printFunction(os, function);
  for (size_t i = 0; i < program.instrs.size(); ++i) {
    if (static_cast<int>(i) == program.backwardStart)
      os << "backward\n";
    if (static_cast<int>(i) == program.weightGradStart)
      os << "weight_grads\n";
    printInstr(os, program.instrs[i]);
  }
  // A stage whose backward is empty (it passes gradients on), or whose W
  // is.
  if (program.backwardStart == static_cast<int>(program.instrs.size()))
    os << "backward\n";
  if (program.weightGradStart == static_cast<int>(program.instrs.size()))
    os << "weight_grads\n";
  os << '\n';
  for (int slot : program.sends)
    os << "send %" << slot << '\n';
  for (int slot : program.sendGrads)
    os << "send_grad %" << slot << '\n';
  if (program.loss >= 0) {
    os << "loss %" << program.loss;
    if (!program.lossPartial.empty())
      os << " partial=" << formatNames(program.lossPartial);
    os << '\n';
  }
  for (int output : program.outputs)
    os << "output %" << output << '\n';
  return os.str();
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {

/// A cursor over one line, with errors that name the file and line.
class LineParser {
public:
  LineParser(const std::string &text, const std::string &where)
      : text(text), where(where) {}

  [[noreturn]] void fail(const std::string &message) const {
    BMRT_FAIL(where + ": " + message);
  }
  void skipSpaces() {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t'))
      ++pos;
  }
  bool atEnd() {
    skipSpaces();
    return pos >= text.size() || text[pos] == '#';
  }
  bool consume(char c) {
    skipSpaces();
    if (pos < text.size() && text[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c))
      fail(std::string("expected '") + c + "'");
  }
  std::string word() {
    skipSpaces();
    size_t start = pos;
    while (pos < text.size() &&
           (std::isalnum(static_cast<unsigned char>(text[pos])) ||
            text[pos] == '_' || text[pos] == '-' || text[pos] == '.' ||
            text[pos] == '+'))
      ++pos;
    if (start == pos)
      fail("expected a word");
    return text.substr(start, pos - start);
  }
  int64_t integer() {
    std::string w = word();
    try {
      size_t used = 0;
      long long v = std::stoll(w, &used);
      if (used != w.size())
        fail("expected an integer, got '" + w + "'");
      return v;
    } catch (const std::logic_error &) {
      fail("expected an integer, got '" + w + "'");
    }
  }
  double number(bool &isFloat) {
    std::string w = word();
    isFloat = w.find_first_of(".eEn") != std::string::npos;
    try {
      size_t used = 0;
      double v = isFloat ? std::stod(w, &used) : double(std::stoll(w, &used));
      if (used != w.size())
        fail("expected a number, got '" + w + "'");
      return v;
    } catch (const std::logic_error &) {
      fail("expected a number, got '" + w + "'");
    }
  }
  std::string quoted() {
    skipSpaces();
    expect('"');
    std::string out;
    while (pos < text.size() && text[pos] != '"') {
      if (text[pos] == '\\' && pos + 1 < text.size())
        ++pos;
      out += text[pos++];
    }
    expect('"');
    return out;
  }
  bool peekIs(char c) {
    skipSpaces();
    return pos < text.size() && text[pos] == c;
  }
  /// "%N" or, where `allowAbsent`, "_" (-1).
  int slotRef(bool allowAbsent = false) {
    if (allowAbsent && consume('_'))
      return -1;
    expect('%');
    int64_t n = integer();
    if (n < 0 || n > (1 << 30))
      fail("slot %" + std::to_string(n) + " is out of range");
    return static_cast<int>(n);
  }
  std::string rest() {
    skipSpaces();
    return pos < text.size() ? text.substr(pos) : "";
  }

private:
  const std::string &text;
  std::string where;
  size_t pos = 0;
};

/// "[64,192]": a shape whose bytes do not overflow.
Shape parseDims(LineParser &p, DType dtype) {
  Shape shape;
  p.expect('[');
  if (!p.consume(']')) {
    do {
      int64_t d = p.integer();
      if (d < 0 || d > (int64_t(1) << 40))
        p.fail("dimension " + std::to_string(d) + " is out of range");
      shape.push_back(d);
    } while (p.consume(','));
    p.expect(']');
  }
  // Refuse shapes whose element count or bytes would overflow.
  double elements = 1;
  for (int64_t d : shape)
    elements *= static_cast<double>(d);
  if (elements * sizeOf(dtype) > double(int64_t(1) << 50))
    p.fail("tensor of " + formatShape(shape) + " is too large");
  return shape;
}

void parseTypedShape(LineParser &p, Slot &slot) {
  std::string type = p.word();
  if (!parseDType(type, slot.dtype))
    p.fail("unknown element type '" + type + "'");
  slot.shape = parseDims(p, slot.dtype);
}

/// ["dp","tp"]: a list of quoted names.
std::vector<std::string> parseNames(LineParser &p) {
  std::vector<std::string> names;
  p.expect('[');
  if (!p.consume(']')) {
    do
      names.push_back(p.quoted());
    while (p.consume(','));
    p.expect(']');
  }
  return names;
}

/// `sharding=[[...],...] partial=[...]` after a slot's type and name.
void parseSlotSharding(LineParser &p, Slot &slot) {
  while (!p.atEnd() && !p.peekIs('=')) {
    std::string key = p.word();
    if (key == "frozen" && slot.kind == SlotKind::Param && !slot.frozen) {
      slot.frozen = true;
      continue;
    }
    p.expect('=');
    if (key == "sharding" && slot.sharding.empty()) {
      p.expect('[');
      do
        slot.sharding.push_back(parseNames(p));
      while (p.consume(','));
      p.expect(']');
      if (slot.sharding.size() != slot.shape.size())
        p.fail("the sharding lists " + std::to_string(slot.sharding.size()) +
               " dims; the slot has " + std::to_string(slot.shape.size()));
    } else if (key == "partial" && slot.partial.empty()) {
      slot.partial = parseNames(p);
    } else if (key == "model" && slot.model.empty() &&
               slot.kind == SlotKind::Param) {
      slot.model = parseDims(p, slot.dtype);
    } else {
      p.fail("unexpected '" + key + "=' on a slot (sharding= and partial= " +
             "come once each, model= once on a parameter)");
    }
  }
}

/// "mesh tp=2 ep=1 dp=2 pp=1".
void parseMesh(LineParser &p, Program &program) {
  if (!program.mesh.empty())
    p.fail("a second mesh line");
  if (!program.slots.empty())
    p.fail("the mesh must come before the slots");
  while (!p.atEnd()) {
    MeshAxis axis;
    axis.name = p.word();
    p.expect('=');
    int64_t size = p.integer();
    if (size < 1 || size > (1 << 20))
      p.fail("mesh axis '" + axis.name + "' has size " + std::to_string(size));
    axis.size = static_cast<int>(size);
    for (const MeshAxis &other : program.mesh)
      if (other.name == axis.name)
        p.fail("mesh axis '" + axis.name + "' appears twice");
    program.mesh.push_back(axis);
  }
  if (program.mesh.empty())
    p.fail("the mesh line names no axis");
}

void parseConstantValues(LineParser &p, Slot &slot) {
  int64_t n = numElements(slot.shape);
  size_t width = sizeOf(slot.dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (p.atEnd())
      p.fail("constant has " + std::to_string(i) + " values, its shape " +
             formatShape(slot.shape) + " needs " + std::to_string(n));
    bool isFloat = false;
    double v = p.number(isFloat);
    // Grown value by value: a corrupt shape fails on its missing values
    // instead of allocating its bytes first.
    slot.data.resize((i + 1) * width);
    uint8_t *at = slot.data.data() + i * width;
    switch (slot.dtype) {
    case DType::F32: {
      float f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
      break;
    }
    case DType::I64: {
      int64_t x = static_cast<int64_t>(v);
      std::memcpy(at, &x, 8);
      break;
    }
    case DType::I32: {
      int32_t x = static_cast<int32_t>(v);
      std::memcpy(at, &x, 4);
      break;
    }
    case DType::Bool:
      *at = v != 0;
      break;
    }
  }
  if (!p.atEnd())
    p.fail("constant has more values than its shape " +
           formatShape(slot.shape) + " holds");
}

/// Where slots and instructions go: the program itself, or the function
/// being read.
struct Scope {
  std::vector<Slot> &slots;
  std::vector<Instr> &instrs;
  /// Arguments of a function are defined on entry.
  int numArgs = 0;
  bool isFunction = false;
  std::vector<bool> defined;

  /// Slots that hold a value before any instruction runs.
  void startInstructions() {
    if (defined.size() == slots.size())
      return;
    defined.assign(slots.size(), false);
    for (size_t i = 0; i < slots.size(); ++i)
      defined[i] = isFunction ? static_cast<int>(i) < numArgs
                              : slots[i].kind != SlotKind::Value &&
                                    slots[i].kind != SlotKind::Grad;
  }
};

void parseSlot(LineParser &p, Scope &scope) {
  int index = p.slotRef();
  if (index != static_cast<int>(scope.slots.size()))
    p.fail("slot %" + std::to_string(index) + " is out of order (expected %" +
           std::to_string(scope.slots.size()) + ")");
  if (!scope.instrs.empty())
    p.fail("slots must come before the instructions");
  Slot slot;
  std::string kind = p.word();
  if (!parseSlotKind(kind, slot.kind))
    p.fail("unknown slot kind '" + kind + "'");
  if (scope.isFunction && slot.kind != SlotKind::Value)
    p.fail("a function's slots are values (its arguments and results are "
           "bound by each call)");
  parseTypedShape(p, slot);
  if (p.peekIs('"'))
    slot.name = p.quoted();
  parseSlotSharding(p, slot);
  if (scope.isFunction && !slot.sharding.empty())
    p.fail("a function's slots take the sharding of what each call binds");
  if (slot.kind == SlotKind::Const) {
    p.expect('=');
    parseConstantValues(p, slot);
  }
  if (!p.atEnd())
    p.fail("unexpected text after the slot");
  scope.slots.push_back(std::move(slot));
}

Attr parseAttrValue(LineParser &p) {
  Attr attr;
  if (p.peekIs('"')) {
    attr.kind = Attr::Kind::String;
    attr.s = p.quoted();
  } else if (p.consume('[')) {
    attr.kind = Attr::Kind::Ints;
    if (!p.consume(']')) {
      do
        attr.ints.push_back(p.integer());
      while (p.consume(','));
      p.expect(']');
    }
  } else {
    bool isFloat = false;
    double v = p.number(isFloat);
    attr.kind = isFloat ? Attr::Kind::Float : Attr::Kind::Int;
    if (isFloat)
      attr.f = v;
    else
      attr.i = static_cast<int64_t>(v);
  }
  return attr;
}

void parseInstr(LineParser &p, Scope &scope) {
  scope.startInstructions();
  Instr instr;
  do
    instr.results.push_back(p.slotRef());
  while (p.consume(','));
  p.expect('=');
  instr.op = p.word();
  if (scope.isFunction && instr.op == "call")
    p.fail("a call inside a function (is the function's 'end' missing?)");
  auto checkSlot = [&](int slot, const char *role) {
    if (slot >= static_cast<int>(scope.slots.size()))
      p.fail(std::string(role) + " %" + std::to_string(slot) +
             " is not a declared slot");
  };
  if (p.peekIs('%') || p.peekIs('_')) {
    do {
      int operand = p.slotRef(/*allowAbsent=*/true);
      if (operand >= 0) {
        checkSlot(operand, "operand");
        if (!scope.defined[operand])
          p.fail("operand %" + std::to_string(operand) +
                 " is used before it is computed");
      }
      instr.operands.push_back(operand);
    } while (p.consume(','));
  }
  if (p.consume('{')) {
    do {
      std::string key = p.word();
      p.expect('=');
      instr.attrs[key] = parseAttrValue(p);
    } while (p.consume(','));
    p.expect('}');
  }
  if (p.consume('#'))
    instr.comment = p.rest();
  else if (!p.atEnd())
    p.fail("unexpected text after the instruction");
  for (int result : instr.results) {
    checkSlot(result, "result");
    SlotKind kind = scope.slots[result].kind;
    if (kind != SlotKind::Value && kind != SlotKind::Grad)
      p.fail("result %" + std::to_string(result) + " is a " + nameOf(kind) +
             " slot; only values and gradients are computed");
    if (scope.defined[result])
      p.fail("slot %" + std::to_string(result) + " is computed twice");
    scope.defined[result] = true;
  }
  scope.instrs.push_back(std::move(instr));
}

/// A call binds its operands to the callee's arguments and its results to
/// the callee's results, which must agree in element type and shape.
void checkCall(LineParser &p, const Program &program, const Instr &call) {
  if (call.op != "call")
    return;
  auto callee = call.attrs.find("callee");
  if (callee == call.attrs.end() || callee->second.kind != Attr::Kind::String)
    p.fail("a call needs {callee=\"NAME\"}");
  const Function *function = nullptr;
  for (const Function &f : program.functions)
    if (f.name == callee->second.s)
      function = &f;
  if (!function)
    p.fail("call of '" + callee->second.s + "', which no func defines before");
  if (call.operands.size() != static_cast<size_t>(function->numArgs) ||
      call.results.size() != function->results.size())
    p.fail("call of '" + function->name + "' binds " +
           std::to_string(call.operands.size()) + " operands and " +
           std::to_string(call.results.size()) + " results; it takes " +
           std::to_string(function->numArgs) + " and gives " +
           std::to_string(function->results.size()));
  auto same = [&](const Slot &a, const Slot &b, const std::string &what) {
    if (a.dtype != b.dtype || a.shape != b.shape)
      p.fail(what + " of the call of '" + function->name + "' is " +
             nameOf(a.dtype) + formatShape(a.shape) + ", the function's is " +
             nameOf(b.dtype) + formatShape(b.shape));
  };
  for (size_t i = 0; i < call.operands.size(); ++i) {
    if (call.operands[i] < 0)
      p.fail("a call binds every argument");
    same(program.slots[call.operands[i]], function->slots[i],
         "operand " + std::to_string(i));
  }
  for (size_t i = 0; i < call.results.size(); ++i)
    same(program.slots[call.results[i]],
         function->slots[function->results[i]], "result " + std::to_string(i));
}

/// "func NAME NARGS -> %R, ..." opens a function.
Function parseFunctionHeader(LineParser &p) {
  Function function;
  function.name = p.word();
  function.numArgs = static_cast<int>(p.integer());
  p.expect('-');
  p.expect('>');
  if (!p.atEnd())
    do
      function.results.push_back(p.slotRef());
    while (p.consume(','));
  if (!p.atEnd())
    p.fail("unexpected text after the function header");
  return function;
}

void finishFunction(LineParser &p, Function &function, Scope &scope) {
  if (function.numArgs < 0 ||
      function.numArgs > static_cast<int>(function.slots.size()))
    p.fail("function '" + function.name + "' declares " +
           std::to_string(function.numArgs) + " arguments but " +
           std::to_string(function.slots.size()) + " slots");
  scope.startInstructions();
  for (int r : function.results)
    if (r < function.numArgs || r >= static_cast<int>(function.slots.size()) ||
        !scope.defined[r])
      p.fail("function '" + function.name + "' gives %" + std::to_string(r) +
             ", which it never computes");
  for (const Instr &instr : function.instrs)
    if (instr.op == "call")
      p.fail("function '" + function.name + "' calls another; functions "
             "hold kernels only");
}

} // namespace

Program parseProgram(const std::string &text, const std::string &source) {
  Program program;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  bool sawHeader = false, sawLoss = false;
  Scope top{program.slots, program.instrs};
  std::optional<Function> function;
  std::optional<Scope> inFunction;
  while (std::getline(lines, line)) {
    ++number;
    LineParser p(line, source + ":" + std::to_string(number));
    if (p.atEnd())
      continue;
    if (!sawHeader) {
      if (p.word() != "bmc-step-program")
        p.fail("not a bmc step program (it must start with "
               "'bmc-step-program VERSION')");
      int64_t version = p.integer();
      if (version != Program::kVersion)
        p.fail("step program version " + std::to_string(version) +
               " is not supported (this trainer reads version " +
               std::to_string(Program::kVersion) + ")");
      sawHeader = true;
      continue;
    }
    Scope &scope = inFunction ? *inFunction : top;
    if (p.peekIs('%')) {
      parseInstr(p, scope);
      if (!inFunction)
        checkCall(p, program, program.instrs.back());
      continue;
    }
    std::string keyword = p.word();
    if (keyword == "slot") {
      parseSlot(p, scope);
    } else if (keyword == "func") {
      if (inFunction)
        p.fail("a func inside a func");
      if (!program.instrs.empty())
        p.fail("functions must come before the program's instructions");
      function = parseFunctionHeader(p);
      inFunction.emplace(Scope{function->slots, function->instrs,
                               function->numArgs, /*isFunction=*/true});
    } else if (keyword == "end") {
      if (!inFunction)
        p.fail("'end' without a func");
      finishFunction(p, *function, *inFunction);
      inFunction.reset();
      program.functions.push_back(std::move(*function));
      function.reset();
    } else if (inFunction) {
      p.fail("unexpected '" + keyword + "' inside function '" +
             function->name + "'");
    } else if (keyword == "model") {
      program.model = p.quoted();
    } else if (keyword == "mesh") {
      parseMesh(p, program);
    } else if (keyword == "backward") {
      if (program.backwardStart >= 0)
        p.fail("a second 'backward' line");
      program.backwardStart = static_cast<int>(program.instrs.size());
    } else if (keyword == "weight_grads") {
      if (program.backwardStart < 0)
        p.fail("a 'weight_grads' line before the 'backward' line");
      if (program.weightGradStart >= 0)
        p.fail("a second 'weight_grads' line");
      program.weightGradStart = static_cast<int>(program.instrs.size());
    } else if (keyword == "send" || keyword == "send_grad") {
      int slot = p.slotRef();
      if (slot >= static_cast<int>(program.slots.size()))
        p.fail(keyword + " %" + std::to_string(slot) + " is not a slot");
      std::vector<int> &target =
          keyword == "send" ? program.sends : program.sendGrads;
      if (std::find(target.begin(), target.end(), slot) != target.end())
        p.fail(keyword + " %" + std::to_string(slot) + " is listed twice");
      if (!p.atEnd())
        p.fail("unexpected text after " + keyword + " %" +
               std::to_string(slot));
      target.push_back(slot);
      sawLoss = true;
    } else if (keyword == "loss" || keyword == "output") {
      int slot = p.slotRef();
      if (slot >= static_cast<int>(program.slots.size()))
        p.fail(keyword + " %" + std::to_string(slot) + " is not a slot");
      if (keyword == "loss" && !p.atEnd()) {
        if (p.word() != "partial")
          p.fail("expected 'partial=' after the loss");
        p.expect('=');
        program.lossPartial = parseNames(p);
      }
      if (!p.atEnd())
        p.fail("unexpected text after " + keyword);
      if (keyword == "loss")
        program.loss = slot;
      else
        program.outputs.push_back(slot);
      sawLoss = true;
    } else {
      p.fail("unknown statement '" + keyword + "'");
    }
  }
  BMRT_CHECK(sawHeader, source + ": empty step program");
  BMRT_CHECK(!inFunction, source + ": function '" + function->name +
                              "' has no 'end'");
  BMRT_CHECK(sawLoss,
             source + ": the step program names no loss and no output");
  top.startInstructions();
  for (size_t i = 0; i < program.slots.size(); ++i)
    BMRT_CHECK(program.slots[i].kind != SlotKind::Grad || top.defined[i],
               source + ": gradient %" + std::to_string(i) + " of '" +
                   program.slots[i].name + "' is never computed");
  return program;
}

Program loadProgram(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  BMRT_CHECK(in, "cannot read the step program '" + path +
                     "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parseProgram(text.str(), path);
}

} // namespace bmrt
