//===- Runner.cpp - one-instruction cases run on a device -----------------===//

#include "Runner.h"

#include "bmrt/Collectives.h"
#include "bmrt/Comm.h"
#include "bmrt/Error.h"
#include "bmrt/SingleOp.h"
#include "bmrt/Sharding.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

namespace bmrt::conformance {

//===----------------------------------------------------------------------===//
// Host tensors
//===----------------------------------------------------------------------===//

double HostTensor::at(int64_t i) const {
  switch (dtype) {
  case DType::F32: {
    float v;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    return v;
  }
  case DType::I64: {
    int64_t v;
    std::memcpy(&v, bytes.data() + i * 8, 8);
    return static_cast<double>(v);
  }
  case DType::I32: {
    int32_t v;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    return v;
  }
  case DType::Bool:
    return bytes[i];
  }
  return 0;
}

namespace {

HostTensor sized(DType dtype, Shape shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.assign(t.size() * sizeOf(dtype), 0);
  return t;
}

void put(HostTensor &t, int64_t i, double value) {
  switch (t.dtype) {
  case DType::F32: {
    float v = static_cast<float>(value);
    std::memcpy(t.bytes.data() + i * 4, &v, 4);
    return;
  }
  case DType::I64: {
    int64_t v = static_cast<int64_t>(value);
    std::memcpy(t.bytes.data() + i * 8, &v, 8);
    return;
  }
  case DType::I32: {
    int32_t v = static_cast<int32_t>(value);
    std::memcpy(t.bytes.data() + i * 4, &v, 4);
    return;
  }
  case DType::Bool:
    t.bytes[i] = value != 0;
    return;
  }
}

/// A float in [0, 1) from 24 random bits: exact, the same everywhere.
float unit(std::mt19937 &gen) {
  return static_cast<float>(gen() >> 8) * (1.0f / 16777216.0f);
}

} // namespace

HostTensor uniform(Shape shape, uint32_t seed, float lo, float hi) {
  HostTensor t = sized(DType::F32, std::move(shape));
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < t.size(); ++i)
    put(t, i, lo + (hi - lo) * unit(gen));
  return t;
}

HostTensor awayFromZero(Shape shape, uint32_t seed, float lo, float hi) {
  HostTensor t = sized(DType::F32, std::move(shape));
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < t.size(); ++i) {
    float magnitude = lo + (hi - lo) * unit(gen);
    put(t, i, (gen() & 1) ? magnitude : -magnitude);
  }
  return t;
}

HostTensor randomInts(DType dtype, Shape shape, uint32_t seed, int64_t lo,
                      int64_t hi) {
  HostTensor t = sized(dtype, std::move(shape));
  std::mt19937 gen(seed);
  for (int64_t i = 0; i < t.size(); ++i)
    put(t, i, static_cast<double>(lo + static_cast<int64_t>(
                                           gen() % static_cast<uint32_t>(
                                                       hi - lo + 1))));
  return t;
}

HostTensor randomBools(Shape shape, uint32_t seed) {
  return randomInts(DType::Bool, std::move(shape), seed, 0, 1);
}

HostTensor floats(Shape shape, const std::vector<float> &values) {
  HostTensor t = sized(DType::F32, std::move(shape));
  BMRT_CHECK(static_cast<int64_t>(values.size()) == t.size(),
             "conformance: " + std::to_string(values.size()) +
                 " values for " + formatShape(t.shape));
  for (int64_t i = 0; i < t.size(); ++i)
    put(t, i, values[i]);
  return t;
}

HostTensor ints(DType dtype, Shape shape, const std::vector<int64_t> &values) {
  HostTensor t = sized(dtype, std::move(shape));
  BMRT_CHECK(static_cast<int64_t>(values.size()) == t.size(),
             "conformance: " + std::to_string(values.size()) +
                 " values for " + formatShape(t.shape));
  for (int64_t i = 0; i < t.size(); ++i)
    put(t, i, static_cast<double>(values[i]));
  return t;
}

HostTensor absent() {
  HostTensor t;
  t.absent = true;
  return t;
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

Build::Build(std::string name, std::string op) {
  c.name = std::move(name);
  c.op = std::move(op);
}

Build &Build::in(HostTensor operand) {
  c.operands.push_back(std::move(operand));
  return *this;
}

Build &Build::out(DType dtype, Shape shape) {
  c.results.emplace_back(dtype, std::move(shape));
  return *this;
}

Build &Build::i(const std::string &name, int64_t value) {
  Attr a;
  a.kind = Attr::Kind::Int;
  a.i = value;
  c.attrs[name] = a;
  return *this;
}

Build &Build::f(const std::string &name, double value) {
  Attr a;
  a.kind = Attr::Kind::Float;
  a.f = value;
  c.attrs[name] = a;
  return *this;
}

Build &Build::ints(const std::string &name, std::vector<int64_t> values) {
  Attr a;
  a.kind = Attr::Kind::Ints;
  a.ints = std::move(values);
  c.attrs[name] = a;
  return *this;
}

Build &Build::s(const std::string &name, std::string value) {
  Attr a;
  a.kind = Attr::Kind::String;
  a.s = std::move(value);
  c.attrs[name] = a;
  return *this;
}

Build &Build::tol(Tolerance tolerance) {
  c.tolerance = tolerance;
  return *this;
}

Build &Build::gemmInputs(int count) {
  c.gemmInputs = count;
  return *this;
}

Build &Build::collective() {
  c.collective = true;
  return s("axes", "tp");
}

Build &Build::check(Invariant invariant) {
  c.invariant = std::move(invariant);
  return *this;
}

const std::vector<Case> &allCases() {
  static const std::vector<Case> cases = [] {
    std::vector<Case> all;
    for (auto table :
         {attentionCases, collectiveCases, contractionCases, dataMovementCases,
          elementwiseCases, lossCases, normCases, poolCases, reductionCases})
      for (Case &c : table())
        all.push_back(std::move(c));
    std::sort(all.begin(), all.end(), [](const Case &a, const Case &b) {
      return a.name < b.name;
    });
    for (size_t i = 1; i < all.size(); ++i)
      BMRT_CHECK(all[i].name != all[i - 1].name,
                 "conformance: two cases are named " + all[i].name);
    return all;
  }();
  return cases;
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

namespace {

/// The one-rank mesh of collective cases, every axis of size 1.
std::vector<MeshAxis> oneRankMesh() {
  return {{"tp", 1}, {"ep", 1}, {"dp", 1}, {"pp", 1}};
}

/// The process's one-rank world (local: no launcher starts this binary)
/// and its collectives, created on first use.
Collectives &oneRankCollectives() {
  static std::unique_ptr<World> world = createWorld();
  static Collectives collectives(*world, Mesh(oneRankMesh()));
  return collectives;
}

} // namespace

OpSignature signatureOf(const Case &c) {
  OpSignature signature;
  signature.op = c.op;
  signature.attrs = c.attrs;
  if (c.collective)
    signature.mesh = oneRankMesh();
  for (const HostTensor &t : c.operands)
    signature.operands.push_back(
        t.absent ? std::nullopt : std::optional<TensorType>({t.dtype, t.shape}));
  for (const auto &[dtype, shape] : c.results)
    signature.results.push_back({dtype, shape});
  return signature;
}

std::vector<HostTensor> runCase(const Case &c, Device &device) {
  SingleOp op(device, signatureOf(c), "conformance case " + c.name,
              c.collective ? &oneRankCollectives() : nullptr);
  Stream &stream = device.computeStream();
  for (size_t i = 0; i < c.operands.size(); ++i)
    if (!c.operands[i].absent && !c.operands[i].bytes.empty())
      device.copyToDevice(op.operand(i).data, c.operands[i].bytes.data(),
                          c.operands[i].bytes.size(), stream);
  op.run();
  std::vector<HostTensor> results;
  for (size_t r = 0; r < c.results.size(); ++r) {
    const TensorView &view = op.result(r);
    HostTensor t = sized(view.dtype, view.shape);
    if (!t.bytes.empty())
      device.copyToHost(t.bytes.data(), view.data, t.bytes.size(), stream);
    results.push_back(std::move(t));
  }
  stream.synchronize();
  return results;
}

Device *deviceOf(const Backend &backend, ContractionPrecision precision) {
  static std::map<std::string, std::unique_ptr<Device>> devices;
  std::string key = std::string(backend.name) + " " + nameOf(precision);
  auto it = devices.find(key);
  if (it == devices.end()) {
    std::unique_ptr<Device> device;
    if (backend.available()) {
      DeviceOptions options;
      options.contractionPrecision = precision;
      device = backend.createDevice(options);
    }
    it = devices.emplace(key, std::move(device)).first;
  }
  return it->second.get();
}

//===----------------------------------------------------------------------===//
// The bf16 bound's operands
//===----------------------------------------------------------------------===//

namespace {

/// `t` (F32) with f applied to every element.
template <typename F> HostTensor mapped(const HostTensor &t, F f) {
  HostTensor out = t;
  if (t.absent || t.dtype != DType::F32)
    return out;
  for (int64_t i = 0; i < t.size(); ++i)
    put(out, i, f(static_cast<float>(t.at(i))));
  return out;
}

} // namespace

Case magnitudeCase(const Case &c) {
  Case m = c;
  for (size_t k = 0; k < m.operands.size(); ++k)
    m.operands[k] = mapped(c.operands[k], [&](float x) {
      return static_cast<int>(k) < c.gemmInputs ? std::fabs(x) : 0.f;
    });
  auto alpha = m.attrs.find("alpha");
  if (alpha != m.attrs.end())
    alpha->second.f = std::fabs(alpha->second.f);
  m.invariant = nullptr;
  return m;
}

float roundToBf16(float x) {
  if (std::isnan(x))
    return x;
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  // Adds 0x7fff plus the lowest kept bit, then truncates: nearest, ties
  // to even (an overflow past the largest bf16 lands on infinity, as RN
  // does).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  bits &= 0xffff0000u;
  std::memcpy(&x, &bits, 4);
  return x;
}

Case bf16OperandsCase(const Case &c) {
  Case r = c;
  for (int k = 0; k < c.gemmInputs && k < static_cast<int>(c.operands.size());
       ++k)
    r.operands[k] = mapped(c.operands[k], roundToBf16);
  return r;
}

} // namespace bmrt::conformance
