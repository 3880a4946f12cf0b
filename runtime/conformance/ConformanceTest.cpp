//===- ConformanceTest.cpp - every case on every backend ------------------===//
//
// Conformance/ConformanceTest.Matches/<backend>_<case>: each case on each
// backend built in. The CPU backend is the reference (its kernels are
// tested against reference loops in runtime/cpu/test): another backend's
// results must match the CPU's within the case's tolerance (Tolerance.h);
// the CPU's own run proves the case well-formed and checks the case's
// invariant where it has one. A backend without a device here skips.
//
// Conformance/ConformanceTest.Matches/<backend>_bf16_<case>: each case with
// GEMMs (Case::gemmInputs) on each non-CPU backend's device made with bf16
// GEMM inputs, against the CPU's fp32 within the case's tolerance plus the
// bf16 bound per element (Tolerance.h). Bf16Bound.*: that bound checked on
// the CPU alone, with operands rounded to bf16 on the host.
//
// OpCoverage.EveryOpHasACase: every op of the spec has a case.
// KernelCoverage.<backend>: the backend's kernel table against the spec.
// Trainer/TrainerConformance.*/<backend>: the trainer's own kernels.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

#include "bmrt/Error.h"
#include "bmrt/OpSpec.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

namespace bmrt::conformance {
namespace {

const Backend &cpuBackend() {
  const Backend *cpu = findBackend("cpu");
  BMRT_CHECK(cpu, "conformance: no cpu backend");
  return *cpu;
}

std::vector<std::string> backendNames() {
  std::vector<std::string> names;
  for (const Backend *backend : builtinBackends())
    names.push_back(backend->name);
  return names;
}

/// Checks `got` (of a backend) against `ref` (the CPU's): dtypes and
/// shapes equal, integers and Bools exactly, F32 within `tolerance`, plus
/// `factor` times element i of `magnitude` where given (the bf16 bound).
/// Reports the first few elements that differ.
void expectClose(const std::string &what, const HostTensor &got,
                 const HostTensor &ref, Tolerance tolerance,
                 const HostTensor *magnitude = nullptr, double factor = 0) {
  ASSERT_EQ(got.dtype, ref.dtype) << what;
  ASSERT_EQ(got.shape, ref.shape) << what;
  bool exact = ref.dtype != DType::F32;
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < ref.size(); ++i) {
    double g = got.at(i), r = ref.at(i);
    double bound = tolerance.atol + tolerance.rtol * std::fabs(r) +
                   (magnitude ? factor * magnitude->at(i) : 0);
    bool same = exact ? g == r
                      : (std::isnan(r) ? std::isnan(g)
                                       : std::fabs(g - r) <= bound);
    if (same)
      continue;
    if (bad++ < 5)
      first << "\n  element " << i << ": got " << g << ", the cpu gives " << r
            << " (difference " << g - r << ", bound " << bound << ")";
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref.size()
                    << " elements differ beyond atol " << tolerance.atol
                    << " + rtol " << tolerance.rtol << " * |ref|"
                    << (magnitude ? " + " + std::to_string(factor) +
                                        " * (|A| . |B|)"
                                  : std::string())
                    << first.str();
}

/// Checks `got`, a run of `c` with bf16 GEMM inputs, against the CPU's
/// fp32 run within the case's tolerance plus the bf16 bound (Tolerance.h).
void expectWithinBf16Bound(const std::string &what, const Case &c,
                           const std::vector<HostTensor> &got) {
  Device &cpu = *deviceOf(cpuBackend());
  std::vector<HostTensor> ref = runCase(c, cpu);
  std::vector<HostTensor> magnitude = runCase(magnitudeCase(c), cpu);
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t r = 0; r < got.size(); ++r)
    expectClose(what + " result " + std::to_string(r), got[r], ref[r],
                c.tolerance, &magnitude[r], bf16GemmFactor(c.gemmInputs));
}

//===----------------------------------------------------------------------===//
// One instruction per case
//===----------------------------------------------------------------------===//

struct CaseParam {
  std::string backend;
  size_t index;
  ContractionPrecision precision = ContractionPrecision::F32;

  /// "cuda", "cuda_bf16".
  std::string device() const {
    return precision == ContractionPrecision::F32
               ? backend
               : backend + "_" + nameOf(precision);
  }
};

/// "cuda_bf16 matmul_batched" in test listings.
void PrintTo(const CaseParam &param, std::ostream *os) {
  *os << param.device() << " " << allCases()[param.index].name;
}

class ConformanceTest : public testing::TestWithParam<CaseParam> {};

TEST_P(ConformanceTest, Matches) {
  const CaseParam &param = GetParam();
  const Case &c = allCases()[param.index];
  const Backend *backend = findBackend(param.backend);
  Device *device = backend ? deviceOf(*backend, param.precision) : nullptr;
  if (!device)
    GTEST_SKIP() << "backend '" << param.backend << "' has no device here";
  std::vector<HostTensor> got;
  try {
    got = runCase(c, *device);
  } catch (const Error &e) {
    FAIL() << param.device() << ": " << e.what();
  }
  ASSERT_EQ(got.size(), c.results.size());
  if (param.precision == ContractionPrecision::BF16)
    return expectWithinBf16Bound(param.device() + " " + c.name, c, got);
  if (param.backend == "cpu") {
    for (size_t r = 0; r < got.size(); ++r)
      if (got[r].dtype == DType::F32)
        for (int64_t i = 0; i < got[r].size(); ++i)
          ASSERT_TRUE(std::isfinite(got[r].at(i)))
              << "result " << r << " element " << i << " is " << got[r].at(i);
    if (c.invariant)
      c.invariant(c.operands, got);
    return;
  }
  std::vector<HostTensor> ref = runCase(c, *deviceOf(cpuBackend()));
  for (size_t r = 0; r < got.size(); ++r)
    expectClose(param.backend + " " + c.name + " result " + std::to_string(r),
                got[r], ref[r], c.tolerance);
}

std::vector<CaseParam> caseParams() {
  std::vector<CaseParam> params;
  for (const std::string &backend : backendNames())
    for (size_t i = 0; i < allCases().size(); ++i)
      params.push_back({backend, i});
  // The CPU computes in fp32 whatever it is asked: no bf16 runs of its own.
  for (const std::string &backend : backendNames())
    for (size_t i = 0; i < allCases().size(); ++i)
      if (backend != "cpu" && allCases()[i].gemmInputs >= 2)
        params.push_back({backend, i, ContractionPrecision::BF16});
  return params;
}

INSTANTIATE_TEST_SUITE_P(
    Conformance, ConformanceTest, testing::ValuesIn(caseParams()),
    [](const testing::TestParamInfo<CaseParam> &info) {
      return info.param.device() + "_" + allCases()[info.param.index].name;
    });

//===----------------------------------------------------------------------===//
// The harness itself
//===----------------------------------------------------------------------===//

// A case really runs its kernel: small integers, so the product is exact.
TEST(Runner, RunsTheInstructionOnTheDevice) {
  Case c = Build("matmul_check", "matmul")
               .in(floats({2, 3}, {1, 2, 3, 4, 5, 6}))
               .in(floats({3, 2}, {1, 0, 0, 1, 2, -1}))
               .out({2, 2});
  std::vector<HostTensor> got = runCase(c, *deviceOf(cpuBackend()));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].shape, (Shape{2, 2}));
  std::vector<double> want = {7, -1, 16, -1};
  for (int64_t i = 0; i < 4; ++i)
    EXPECT_EQ(got[0].at(i), want[i]) << "element " << i;
}

// A program the verifier refuses is an error naming the case.
TEST(Runner, RefusesAMalformedCase) {
  Case c = Build("matmul_bad", "matmul")
               .in(uniform({2, 3}, 1))
               .in(uniform({4, 2}, 2))
               .out({2, 2});
  try {
    runCase(c, *deviceOf(cpuBackend()));
    FAIL() << "a 2x3 by 4x2 product ran";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("conformance case matmul_bad"),
              std::string::npos)
        << e.what();
  }
}

// The comparison fails beyond the tolerance and on any integer difference.
TEST(Runner, ComparisonFindsDifferences) {
  HostTensor ref = floats({3}, {1, -2, 100});
  HostTensor near = floats({3}, {1 + 1e-6f, -2, 100 + 5e-4f});
  expectClose("within", near, ref, {1e-5, 1e-5});
  HostTensor far = floats({3}, {1, -2, 100.01f});
  EXPECT_NONFATAL_FAILURE(expectClose("beyond", far, ref, {1e-5, 1e-5}),
                          "1 of 3 elements differ");
  HostTensor a = ints(DType::I64, {2}, {5, 6}), b = ints(DType::I64, {2}, {5, 7});
  EXPECT_NONFATAL_FAILURE(expectClose("ints", b, a, {1, 1}),
                          "1 of 2 elements differ");
}

//===----------------------------------------------------------------------===//
// The bf16 bound, without a GPU
//===----------------------------------------------------------------------===//

/// The cases the bf16 devices run.
std::vector<const Case *> gemmCases() {
  std::vector<const Case *> cases;
  for (const Case &c : allCases())
    if (c.gemmInputs >= 2)
      cases.push_back(&c);
  return cases;
}

TEST(Bf16Bound, RoundsToNearestEven) {
  EXPECT_EQ(roundToBf16(1.0f), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even (1).
  EXPECT_EQ(roundToBf16(1.0f + 1.0f / 256), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6.
  EXPECT_EQ(roundToBf16(1.0f + 3.0f / 256), 1.0f + 1.0f / 64);
  EXPECT_EQ(roundToBf16(1.0f + 1.0f / 200), 1.0f + 1.0f / 128);
  EXPECT_EQ(roundToBf16(-3.0f), -3.0f);
  EXPECT_TRUE(std::isinf(roundToBf16(INFINITY)));
  EXPECT_TRUE(std::isnan(roundToBf16(NAN)));
  // Every rounding is within u = 2^-8 of its value, and some of the
  // cases' operands move by more than 2^-9 (u is not half as large).
  int beyondHalf = 0;
  for (const Case *c : gemmCases())
    for (int k = 0; k < c->gemmInputs; ++k)
      for (int64_t i = 0; i < c->operands[k].size(); ++i) {
        double x = c->operands[k].at(i);
        double moved = std::fabs(roundToBf16(static_cast<float>(x)) - x);
        EXPECT_LE(moved, kBf16UnitRoundoff * std::fabs(x));
        beyondHalf += moved > kBf16UnitRoundoff / 2 * std::fabs(x);
      }
  EXPECT_GT(beyondHalf, 0);
}

TEST(Bf16Bound, FactorCountsTheRoundings) {
  EXPECT_EQ(bf16GemmFactor(1), 0);
  EXPECT_DOUBLE_EQ(bf16GemmFactor(2), std::pow(1 + 1.0 / 256, 2) - 1);
  EXPECT_DOUBLE_EQ(bf16GemmFactor(3), std::pow(1 + 1.0 / 256, 4) - 1);
}

// What a bf16-input GEMM with fp32 accumulation computes, emulated on the
// CPU (operands rounded on the host, then the fp32 kernel), is within the
// bound of every case: the bound the cuda_bf16 runs are held to is tested
// here without a GPU. And it is needed: kReduction alone fails some case.
TEST(Bf16Bound, HoldsForOperandsRoundedOnTheHost) {
  Device &cpu = *deviceOf(cpuBackend());
  int beyondFp32 = 0;
  double worst = 0; // largest |got - ref| / bound seen
  for (const Case *c : gemmCases()) {
    std::vector<HostTensor> got = runCase(bf16OperandsCase(*c), cpu);
    expectWithinBf16Bound("emulated bf16 " + c->name, *c, got);
    std::vector<HostTensor> ref = runCase(*c, cpu);
    std::vector<HostTensor> magnitude = runCase(magnitudeCase(*c), cpu);
    for (size_t r = 0; r < got.size(); ++r)
      for (int64_t i = 0; i < ref[r].size(); ++i) {
        double error = std::fabs(got[r].at(i) - ref[r].at(i));
        double fp32 =
            c->tolerance.atol + c->tolerance.rtol * std::fabs(ref[r].at(i));
        beyondFp32 += error > fp32;
        worst = std::max(
            worst, error / (fp32 + bf16GemmFactor(c->gemmInputs) *
                                       magnitude[r].at(i)));
      }
  }
  EXPECT_GT(beyondFp32, 0) << "bf16 inputs never moved a result beyond the "
                              "fp32 tolerance: the cases do not exercise it";
  std::printf("emulated bf16: %d elements beyond the fp32 tolerance; the "
              "largest error is %.2f of its bound\n",
              beyondFp32, worst);
}

// The bound is not vacuous: a result off by 2^-5 relative (four times the
// bf16 product error) fails it wherever the terms do not cancel.
TEST(Bf16Bound, CatchesALargerError) {
  const Case &c = *gemmCases().front();
  std::vector<HostTensor> ref = runCase(c, *deviceOf(cpuBackend()));
  std::vector<HostTensor> off = ref;
  for (HostTensor &t : off)
    for (int64_t i = 0; i < t.size(); ++i) {
      float v = static_cast<float>(t.at(i)) * (1 + 1.0f / 32);
      std::memcpy(t.bytes.data() + i * 4, &v, 4);
    }
  EXPECT_NONFATAL_FAILURE(expectWithinBf16Bound("off", c, off),
                          "elements differ beyond");
}

// The CUDA backend refuses fp16 GEMMs (no loss scaling yet) before it looks
// for a GPU, so that this machine says it too.
TEST(Bf16Bound, CudaRefusesFp16) {
  const Backend *cuda = findBackend("cuda");
  if (!cuda)
    GTEST_SKIP() << "no cuda backend in this build";
  DeviceOptions options;
  options.contractionPrecision = ContractionPrecision::F16;
  try {
    // The backend's own createDevice: bmrt::createDevice would stop first
    // at "no device on this machine".
    cuda->createDevice(options);
    FAIL() << "a CUDA device was made with fp16 GEMMs";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("loss scaling"), std::string::npos)
        << e.what();
  }
}

//===----------------------------------------------------------------------===//
// Coverage
//===----------------------------------------------------------------------===//

TEST(OpCoverage, EveryOpHasACase) {
  std::set<std::string> covered;
  for (const Case &c : allCases())
    covered.insert(c.op);
  std::string missing;
  for (const std::string &op : stepOpNames())
    if (!covered.count(op))
      missing += " " + op;
  EXPECT_EQ(missing, "") << "ops of OpSpec.def without a conformance case";
  std::string unknown;
  for (const std::string &op : covered)
    if (!isStepOp(op))
      unknown += " " + op;
  EXPECT_EQ(unknown, "") << "cases of ops outside OpSpec.def";
}

/// KernelCoverage.<backend>: no kernel outside the spec, and one for every
/// op of it, in every backend built in, whether or not this machine has
/// its device: coverage is a property of the build (CI builds the CUDA
/// backend without a GPU).
class KernelCoverageTest : public testing::Test {
public:
  explicit KernelCoverageTest(const Backend &backend) : backend(backend) {}

  void TestBody() override {
    std::vector<std::string> kernels = backend.kernels.names();
    std::string extra, missing;
    for (const std::string &op : kernels)
      if (!isStepOp(op))
        extra += " " + op;
    for (const std::string &op : stepOpNames())
      if (!backend.kernels.find(op))
        missing += " " + op;
    EXPECT_EQ(extra, "") << backend.name << " has kernels outside OpSpec.def";
    EXPECT_EQ(missing, "") << backend.name << " has no kernel for these ops";
  }

private:
  const Backend &backend;
};

const bool kKernelCoverageRegistered = [] {
  for (const Backend *backend : builtinBackends())
    testing::RegisterTest(
        "KernelCoverage", backend->name, nullptr, nullptr, __FILE__, __LINE__,
        [backend]() -> testing::Test * {
          return new KernelCoverageTest(*backend);
        });
  return true;
}();

//===----------------------------------------------------------------------===//
// The trainer's kernels
//===----------------------------------------------------------------------===//

/// A tensor in a device's memory, filled from and read back to the host.
class DeviceTensor {
public:
  DeviceTensor(Device &device, const HostTensor &host) : device(device) {
    view.dtype = host.dtype;
    view.shape = host.shape;
    bytes = std::max<size_t>(host.bytes.size(), 1);
    view.data = device.allocate(bytes, MemoryKind::Workspace);
    device.copyToDevice(view.data, host.bytes.data(), host.bytes.size(),
                        device.computeStream());
  }
  ~DeviceTensor() { device.deallocate(view.data, bytes, MemoryKind::Workspace); }
  DeviceTensor(const DeviceTensor &) = delete;
  DeviceTensor &operator=(const DeviceTensor &) = delete;

  HostTensor read() const {
    HostTensor host;
    host.dtype = view.dtype;
    host.shape = view.shape;
    host.bytes.resize(view.bytes());
    device.copyToHost(host.bytes.data(), view.data, view.bytes(),
                      device.computeStream());
    device.computeStream().synchronize();
    return host;
  }

  TensorView view;

private:
  Device &device;
  size_t bytes;
};

const Shape kParamShape = {7, 33};

/// AdamW steps 1 and 2 (bias corrections differ) with a gradient scale.
std::vector<HostTensor> adamwSteps(const Backend &backend, Device &device) {
  DeviceTensor param(device, uniform(kParamShape, 101));
  DeviceTensor grad(device, awayFromZero(kParamShape, 102, 0.01f, 1));
  DeviceTensor m(device, uniform(kParamShape, 103, -0.1f, 0.1f));
  DeviceTensor v(device, uniform(kParamShape, 104, 0.0f, 0.01f));
  AdamWConfig config;
  for (int64_t step = 1; step <= 2; ++step)
    backend.trainer.adamwUpdate(device.computeStream(), param.view, grad.view,
                                m.view, v.view, config, 1e-2f, step, 0.5f);
  return {param.read(), m.read(), v.read()};
}

std::vector<HostTensor> sgdSteps(const Backend &backend, Device &device) {
  DeviceTensor param(device, uniform(kParamShape, 111));
  DeviceTensor grad(device, uniform(kParamShape, 112));
  DeviceTensor buffer(device, uniform(kParamShape, 113));
  SgdConfig config;
  config.weightDecay = 0.01f;
  for (int64_t step = 1; step <= 2; ++step)
    backend.trainer.sgdUpdate(device.computeStream(), param.view, grad.view,
                              buffer.view, config, 1e-1f, step, 0.5f);
  return {param.read(), buffer.read()};
}

/// LAMB's direction on steps 1 and 2, written over the gradient.
std::vector<HostTensor> lambDirections(const Backend &backend, Device &device) {
  DeviceTensor param(device, uniform(kParamShape, 161));
  DeviceTensor grad(device, awayFromZero(kParamShape, 162, 0.01f, 1));
  DeviceTensor m(device, uniform(kParamShape, 163, -0.1f, 0.1f));
  DeviceTensor v(device, uniform(kParamShape, 164, 0.0f, 0.01f));
  LambConfig config;
  for (int64_t step = 1; step <= 2; ++step)
    backend.trainer.lambDirection(device.computeStream(), param.view, grad.view,
                                  m.view, v.view, grad.view, config, step,
                                  0.5f);
  return {grad.read(), m.read(), v.read()};
}

std::vector<HostTensor> larsSteps(const Backend &backend, Device &device) {
  DeviceTensor param(device, uniform(kParamShape, 171));
  DeviceTensor grad(device, uniform(kParamShape, 172));
  DeviceTensor buffer(device, uniform(kParamShape, 173));
  LarsConfig config;
  for (int64_t step = 1; step <= 2; ++step)
    backend.trainer.larsUpdate(device.computeStream(), param.view, grad.view,
                               buffer.view, config, 0.25f, 0.5f);
  return {param.read(), buffer.read()};
}

class TrainerConformance : public testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    backend = findBackend(GetParam());
    ASSERT_NE(backend, nullptr);
    device = deviceOf(*backend);
    if (!device)
      GTEST_SKIP() << "backend '" << GetParam() << "' has no device here";
  }
  bool isCpu() const { return GetParam() == "cpu"; }
  Device &cpu() { return *deviceOf(cpuBackend()); }

  const Backend *backend = nullptr;
  Device *device = nullptr;
};

// One rounding per element: kArithmetic (Tolerance.h); on the CPU, the
// host's own a + b bit for bit.
TEST_P(TrainerConformance, Add) {
  HostTensor a = uniform(kParamShape, 121), b = uniform(kParamShape, 122);
  DeviceTensor x(*device, a), y(*device, b);
  backend->trainer.add(device->computeStream(), x.view, y.view, x.view);
  HostTensor got = x.read();
  HostTensor ref = a;
  for (int64_t i = 0; i < a.size(); ++i) {
    float sum = static_cast<float>(a.at(i)) + static_cast<float>(b.at(i));
    std::memcpy(ref.bytes.data() + 4 * i, &sum, 4);
  }
  expectClose(GetParam() + " add (in place)", got, ref,
              isCpu() ? kExact : kArithmetic);
}

// Accumulated in double on every backend: 231 squares of floats, each
// exact in double, summed in any order differ by ~n * 2^-53 relative.
TEST_P(TrainerConformance, SumOfSquares) {
  HostTensor a = uniform(kParamShape, 131);
  DeviceTensor x(*device, a);
  double got = backend->trainer.sumOfSquares(device->computeStream(), {x.view});
  double ref = 0;
  for (int64_t i = 0; i < a.size(); ++i)
    ref += a.at(i) * a.at(i);
  EXPECT_NEAR(got, ref, 1e-12 * ref);
  // Several tensors, an empty one among them: one sum over all.
  HostTensor b = uniform({5, 3}, 132);
  DeviceTensor y(*device, b), none(*device, uniform({0, 4}, 133));
  double both = backend->trainer.sumOfSquares(device->computeStream(),
                                              {x.view, none.view, y.view});
  for (int64_t i = 0; i < b.size(); ++i)
    ref += b.at(i) * b.at(i);
  EXPECT_NEAR(both, ref, 1e-12 * ref);
}

// A few roundings per element (moments, a square root, a division; the
// bias corrections computed in double): kTranscendental's rtol. On the
// CPU: the first step's update of a fresh state is lr * sign(g) per
// element (m / sqrt(v) = g / |g| after bias correction) -- checked
// separately from the two-step comparison.
TEST_P(TrainerConformance, AdamwUpdate) {
  std::vector<HostTensor> got = adamwSteps(*backend, *device);
  if (!isCpu()) {
    std::vector<HostTensor> ref = adamwSteps(cpuBackend(), cpu());
    for (size_t t = 0; t < got.size(); ++t)
      expectClose(GetParam() + " adamw tensor " + std::to_string(t), got[t],
                  ref[t], kTranscendental);
    return;
  }
  HostTensor p0 = uniform(kParamShape, 141);
  HostTensor g = awayFromZero(kParamShape, 142, 0.01f, 1);
  HostTensor zeros = uniform(kParamShape, 0, 0, 0);
  DeviceTensor param(*device, p0), grad(*device, g), m(*device, zeros),
      v(*device, zeros);
  AdamWConfig config;
  config.weightDecay = 0;
  backend->trainer.adamwUpdate(device->computeStream(), param.view, grad.view,
                               m.view, v.view, config, 1e-2f, 1, 1.0f);
  HostTensor p1 = param.read();
  // |g| >= 0.01 >> epsilon 1e-8: the step is lr within 1e-6 * lr, plus
  // the rounding of p (|p| <= 1: 6e-8).
  for (int64_t i = 0; i < p0.size(); ++i)
    EXPECT_NEAR(p1.at(i) - p0.at(i), g.at(i) > 0 ? -1e-2 : 1e-2, 2e-7)
        << "element " << i;
}

// Two multiply-adds per element: kArithmetic's rounding twice, within
// kTranscendental. On the CPU: the first step sets the buffer to the
// (scaled, decayed) gradient itself, whatever it held (PyTorch).
TEST_P(TrainerConformance, SgdUpdate) {
  std::vector<HostTensor> got = sgdSteps(*backend, *device);
  if (!isCpu()) {
    std::vector<HostTensor> ref = sgdSteps(cpuBackend(), cpu());
    for (size_t t = 0; t < got.size(); ++t)
      expectClose(GetParam() + " sgd tensor " + std::to_string(t), got[t],
                  ref[t], kTranscendental);
    return;
  }
  HostTensor p0 = uniform(kParamShape, 151), g = uniform(kParamShape, 152);
  DeviceTensor param(*device, p0), grad(*device, g),
      buffer(*device, uniform(kParamShape, 153));
  SgdConfig config;
  config.weightDecay = 0;
  backend->trainer.sgdUpdate(device->computeStream(), param.view, grad.view,
                             buffer.view, config, 0.5f, 1, 2.0f);
  HostTensor p1 = param.read(), b1 = buffer.read();
  for (int64_t i = 0; i < p0.size(); ++i) {
    EXPECT_FLOAT_EQ(b1.at(i), 2 * g.at(i)) << "element " << i;
    EXPECT_NEAR(p1.at(i), p0.at(i) - g.at(i), 2e-7) << "element " << i;
  }
}

// AdamW's roundings and one more multiply-add (the decay): within
// kTranscendental. On the CPU, step 1 of a fresh state against the paper's
// u = m^ / (sqrt(v^) + eps) + wd p in double.
TEST_P(TrainerConformance, LambDirection) {
  std::vector<HostTensor> got = lambDirections(*backend, *device);
  if (!isCpu()) {
    std::vector<HostTensor> ref = lambDirections(cpuBackend(), cpu());
    for (size_t t = 0; t < got.size(); ++t)
      expectClose(GetParam() + " lamb tensor " + std::to_string(t), got[t],
                  ref[t], kTranscendental);
    return;
  }
  HostTensor p0 = uniform(kParamShape, 181);
  HostTensor g = awayFromZero(kParamShape, 182, 0.01f, 1);
  HostTensor zeros = uniform(kParamShape, 0, 0, 0);
  DeviceTensor param(*device, p0), grad(*device, g), m(*device, zeros),
      v(*device, zeros), u(*device, zeros);
  LambConfig config;
  backend->trainer.lambDirection(device->computeStream(), param.view, grad.view,
                                 m.view, v.view, u.view, config, 1, 2.0f);
  HostTensor direction = u.read();
  for (int64_t i = 0; i < p0.size(); ++i) {
    double gi = 2.0 * g.at(i);
    double mHat = (1 - double(config.beta1)) * gi / (1 - double(config.beta1));
    double vHat =
        (1 - double(config.beta2)) * gi * gi / (1 - double(config.beta2));
    double want = mHat / (std::sqrt(vHat) + config.epsilon) +
                  double(config.weightDecay) * p0.at(i);
    EXPECT_NEAR(direction.at(i), want, 1e-6 * std::fabs(want) + 1e-7)
        << "element " << i;
  }
}

// One rounding of the product and one of the sum (the CPU may fuse them):
// kArithmetic twice.
TEST_P(TrainerConformance, Axpy) {
  HostTensor x = uniform(kParamShape, 191), y = uniform(kParamShape, 192);
  DeviceTensor dx(*device, x), dy(*device, y);
  backend->trainer.axpy(device->computeStream(), -0.375f, dx.view, dy.view);
  HostTensor got = dy.read();
  for (int64_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(got.at(i), y.at(i) - 0.375 * x.at(i), 2.4e-7)
        << "element " << i;
}

// Two multiply-adds and a subtraction per element: within
// kTranscendental. On the CPU, step 1 against the paper in double.
TEST_P(TrainerConformance, LarsUpdate) {
  std::vector<HostTensor> got = larsSteps(*backend, *device);
  if (!isCpu()) {
    std::vector<HostTensor> ref = larsSteps(cpuBackend(), cpu());
    for (size_t t = 0; t < got.size(); ++t)
      expectClose(GetParam() + " lars tensor " + std::to_string(t), got[t],
                  ref[t], kTranscendental);
    return;
  }
  HostTensor p0 = uniform(kParamShape, 195), g = uniform(kParamShape, 196);
  HostTensor b0 = uniform(kParamShape, 197);
  DeviceTensor param(*device, p0), grad(*device, g), buffer(*device, b0);
  LarsConfig config;
  config.weightDecay = 0.01f;
  backend->trainer.larsUpdate(device->computeStream(), param.view, grad.view,
                              buffer.view, config, 0.5f, 2.0f);
  HostTensor p1 = param.read(), b1 = buffer.read();
  for (int64_t i = 0; i < p0.size(); ++i) {
    double want = double(config.momentum) * b0.at(i) +
                  0.5 * (2.0 * g.at(i) + double(config.weightDecay) * p0.at(i));
    EXPECT_NEAR(b1.at(i), want, 4e-7) << "element " << i;
    EXPECT_NEAR(p1.at(i), p0.at(i) - want, 6e-7) << "element " << i;
  }
}

// The offloaded optimizer's traffic (runtime/trainer/OptimizerOffload.cpp):
// page-locked host memory, copies down and up on streams of their own,
// issued from a second host thread bound to the device, ordered against the
// compute stream by events. Copies are exact: the values come back bit for
// bit, the add in between rounding once as on the host.
TEST_P(TrainerConformance, HostCopiesOnTheirOwnStreams) {
  HostTensor a = uniform(kParamShape, 201), b = uniform(kParamShape, 202);
  DeviceTensor x(*device, a), y(*device, b);
  std::vector<float> host(a.size()), back(a.size());
  const size_t bytes = host.size() * sizeof(float);
  bool pinned = device->pinHostMemory(host.data(), bytes);
  std::unique_ptr<Stream> down = device->createStream(),
                          up = device->createStream();
  std::unique_ptr<Event> written = device->createEvent(),
                         landed = device->createEvent();
  backend->trainer.add(device->computeStream(), x.view, y.view, x.view);
  written->record(device->computeStream());
  std::thread worker([&] {
    device->bindCallingThread();
    down->waitFor(*written);
    device->copyToHost(host.data(), x.view.data, bytes, *down);
    down->synchronize();
    for (float &v : host)
      v = -v;
    device->copyToDevice(y.view.data, host.data(), bytes, *up);
    landed->record(*up);
  });
  worker.join();
  device->computeStream().waitFor(*landed);
  backend->trainer.add(device->computeStream(), x.view, y.view, x.view);
  device->copyToHost(back.data(), x.view.data, bytes, device->computeStream());
  device->computeStream().synchronize();
  if (pinned)
    device->unpinHostMemory(host.data());
  // x + y, then (x + y) + -(x + y): zero exactly, and the copy down holds
  // x + y rounded once.
  for (int64_t i = 0; i < a.size(); ++i) {
    float sum = static_cast<float>(a.at(i)) + static_cast<float>(b.at(i));
    EXPECT_EQ(host[i], -sum) << "element " << i;
    EXPECT_EQ(back[i], 0.0f) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Trainer, TrainerConformance,
                         testing::ValuesIn(backendNames()),
                         [](const testing::TestParamInfo<std::string> &info) {
                           return info.param;
                         });

} // namespace
} // namespace bmrt::conformance
