//===- Init.cpp - step-0 weights generated from a seed --------------------===//
//
// Why our own generator and normal transform, not <random>: the values must
// be the same bits on the development machine (bmc compile --init random)
// and on whichever machine loads the folder (the trainer, a GPU box built
// by another compiler and C library). std::normal_distribution's algorithm
// is unspecified (libstdc++ and libc++ differ), and a sequential engine
// ties each value to the order in which tensors and elements are drawn.
// Here every element is a pure function of (seed, tensor name, flat
// index): a counter-based generator (splitmix64's finaliser applied to
// key + counter * golden gamma, i.e. random access into a splitmix64
// stream), uniforms from its top 53 bits, and Marsaglia's polar method with
// our own natural logarithm. Only +, -, *, / and sqrt are used, which IEEE
// 754 rounds exactly, and this file is compiled with -ffp-contract=off so
// that no compiler fuses them into FMAs (with -march=native and contraction
// on, GCC 12 changes some draws by one unit in the last place): the same
// bits everywhere, any box of a tensor generated alone, and elements
// filled in parallel.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Init.h"
#include "bmrt/Random.h"

#include "bmrt/Box.h"
#include "bmrt/Error.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace bmrt {

using json = nlohmann::json;

namespace {

constexpr uint64_t kGamma = kSplitMixGamma;
uint64_t mix64(uint64_t z) { return splitMix(z); }

/// The counter-th output of the splitmix64 stream that starts at `key`.
uint64_t draw(uint64_t key, uint64_t counter) {
  return mix64(key + (counter + 1) * kGamma);
}

/// In [-1, 1): 53 random bits, exactly representable.
double symmetricUniform(uint64_t bits) {
  return double(bits >> 11) * 0x1.0p-52 - 1.0;
}

/// ln(x) for x > 0 finite, from frexp (exact) and 2 atanh(t) with t =
/// (m - 1) / (m + 1), |t| <= 0.172: eleven terms of its series bring the
/// error to a few units in the last place.
double naturalLog(double x) {
  constexpr double kLn2 = 0x1.62e42fefa39efp-1;
  constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;
  int exponent = 0;
  double m = std::frexp(x, &exponent); // [0.5, 1)
  if (m < kSqrtHalf) {
    m *= 2.0;
    --exponent;
  }
  double t = (m - 1.0) / (m + 1.0);
  double t2 = t * t;
  double series = 0.0;
  for (int k = 23; k >= 1; k -= 2)
    series = series * t2 + 1.0 / double(k);
  return double(exponent) * kLn2 + 2.0 * t * series;
}

/// Attempts of the polar method per element before giving up (each is
/// refused with probability 1 - pi/4; 64 refusals have probability
/// 2^-142).
constexpr uint64_t kAttempts = 64;

const char *kKindNames[] = {"ones", "zeros", "normal", "causal_mask"};

bool parseKind(const std::string &name, InitKind &kind) {
  for (int k = 0; k < 4; ++k)
    if (name == kKindNames[k]) {
      kind = static_cast<InitKind>(k);
      return true;
    }
  return false;
}

/// Element `index` of the tensor, as its dtype's bytes at `out`.
struct ElementFill {
  const InitSpec &spec;
  uint64_t key;
  int64_t maskSide;

  void operator()(uint64_t index, uint8_t *out) const {
    switch (spec.kind) {
    case InitKind::Ones:
    case InitKind::Zeros:
    case InitKind::Normal: {
      float value = spec.kind == InitKind::Ones ? 1.0f
                    : spec.kind == InitKind::Zeros
                        ? 0.0f
                        : float(spec.stddev * initStandardNormal(key, index));
      std::memcpy(out, &value, sizeof value);
      return;
    }
    case InitKind::CausalMask: {
      uint64_t n = static_cast<uint64_t>(maskSide);
      *out = (index % n) <= (index / n) % n;
      return;
    }
    }
  }
};

} // namespace

const char *nameOf(InitKind kind) { return kKindNames[static_cast<int>(kind)]; }

uint64_t initTensorKey(uint64_t seed, const std::string &name) {
  uint64_t hash = 0xCBF29CE484222325ull; // FNV-1a, 64 bits
  for (unsigned char c : name)
    hash = (hash ^ c) * 0x100000001B3ull;
  return mix64(mix64(seed + kGamma) ^ hash);
}

double initStandardNormal(uint64_t key, uint64_t index) {
  for (uint64_t attempt = 0; attempt < kAttempts; ++attempt) {
    uint64_t counter = (index * kAttempts + attempt) * 2;
    double u = symmetricUniform(draw(key, counter));
    double v = symmetricUniform(draw(key, counter + 1));
    double s = u * u + v * v;
    if (s > 0.0 && s < 1.0)
      return u * std::sqrt(-2.0 * naturalLog(s) / s);
  }
  return 0.0;
}

std::string checkInitSpec(const InitSpec &spec) {
  for (int64_t d : spec.shape)
    if (d < 0)
      return "has a negative dimension in " + formatShape(spec.shape);
  if (spec.kind == InitKind::CausalMask) {
    size_t rank = spec.shape.size();
    if (spec.dtype != DType::Bool || rank < 2 ||
        spec.shape[rank - 1] != spec.shape[rank - 2] ||
        spec.shape[rank - 1] == 0)
      return "is a causal mask of " + std::string(nameOf(spec.dtype)) +
             formatShape(spec.shape) + "; a causal mask is i1[..., n, n]";
    return "";
  }
  if (spec.dtype != DType::F32)
    return "is " + std::string(nameOf(spec.dtype)) + " but '" +
           nameOf(spec.kind) + "' fills f32 tensors";
  if (spec.kind == InitKind::Normal &&
      !(std::isfinite(spec.stddev) && spec.stddev >= 0.0))
    return "has stddev " + std::to_string(spec.stddev) +
           "; it must be finite and non-negative";
  return "";
}

std::string printInitPlan(const InitPlan &plan) {
  json tensors = json::array();
  for (const InitSpec &spec : plan.tensors) {
    json t = {{"name", spec.name},
              {"dtype", nameOf(spec.dtype)},
              {"shape", spec.shape},
              {"kind", nameOf(spec.kind)}};
    if (spec.kind == InitKind::Normal)
      t["stddev"] = spec.stddev;
    tensors.push_back(std::move(t));
  }
  // One line per tensor: a GPT-2's 150 specs stay readable.
  std::string text =
      "{\n  \"format\": 1,\n  \"seed\": " + std::to_string(plan.seed) +
      ",\n  \"tensors\": [";
  for (size_t i = 0; i < tensors.size(); ++i)
    text += (i ? ",\n    " : "\n    ") + tensors[i].dump();
  return text + "\n  ]\n}\n";
}

namespace {

InitSpec parseSpec(const json &t, const std::string &where, size_t index) {
  std::string what = where + ": tensor " + std::to_string(index);
  BMRT_CHECK(t.is_object() && t.contains("name") && t["name"].is_string(),
             what + " has no \"name\"");
  InitSpec spec;
  spec.name = t["name"].get<std::string>();
  what = where + ": '" + spec.name + "'";
  BMRT_CHECK(t.contains("dtype") && t["dtype"].is_string() &&
                 parseDType(t["dtype"].get<std::string>(), spec.dtype),
             what + " has no dtype bmrt knows (f32, i64, i32, i1)");
  BMRT_CHECK(t.contains("shape") && t["shape"].is_array(),
             what + " has no \"shape\" list");
  for (const json &d : t["shape"]) {
    BMRT_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0,
               what +
                   " has a shape entry that is not a non-negative "
                   "integer: " +
                   d.dump());
    spec.shape.push_back(d.get<int64_t>());
  }
  std::string kind = t.value("kind", json()).is_string()
                         ? t["kind"].get<std::string>()
                         : std::string("?");
  BMRT_CHECK(parseKind(kind, spec.kind),
             what + " has kind '" + kind +
                 "'; expected ones, zeros, normal or causal_mask");
  if (spec.kind == InitKind::Normal) {
    BMRT_CHECK(t.contains("stddev") && t["stddev"].is_number(),
               what + " is 'normal' without a numeric \"stddev\"");
    spec.stddev = t["stddev"].get<double>();
  }
  std::string problem = checkInitSpec(spec);
  BMRT_CHECK(problem.empty(), what + " " + problem);
  return spec;
}

} // namespace

InitPlan parseInitPlan(const std::string &text, const std::string &where) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  BMRT_CHECK(!j.is_discarded() && j.is_object(), where + " is not valid JSON");
  BMRT_CHECK(j.value("format", json()).is_number_integer() &&
                 j["format"].get<int64_t>() == 1,
             where + " has no \"format\": 1; this runtime reads format 1");
  BMRT_CHECK(j.contains("seed") && j["seed"].is_number_unsigned(),
             where + " has no \"seed\" (a non-negative integer)");
  BMRT_CHECK(j.contains("tensors") && j["tensors"].is_array(),
             where + " has no \"tensors\" list");
  InitPlan plan;
  plan.seed = j["seed"].get<uint64_t>();
  for (const json &t : j["tensors"]) {
    plan.tensors.push_back(parseSpec(t, where, plan.tensors.size()));
    BMRT_CHECK(findInitSpec(plan, plan.tensors.back().name) ==
                   &plan.tensors.back(),
               where + ": '" + plan.tensors.back().name + "' is listed twice");
  }
  return plan;
}

InitPlan readInitPlan(const std::string &path) {
  std::ifstream in(path);
  BMRT_CHECK(in, "cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parseInitPlan(text.str(), "'" + path + "'");
}

const InitSpec *findInitSpec(const InitPlan &plan, const std::string &name) {
  for (const InitSpec &spec : plan.tensors)
    if (spec.name == name)
      return &spec;
  return nullptr;
}

void fillInitBox(const InitSpec &spec, uint64_t seed, const Shape &global,
                 const Shape &offsets, const Shape &box, void *out) {
  std::string problem = checkInitSpec(spec);
  BMRT_CHECK(problem.empty(), "'" + spec.name + "' " + problem);
  BMRT_CHECK(global == spec.shape || sameElementOrder(global, spec.shape),
             "'" + spec.name + "' is " + formatShape(spec.shape) +
                 ", not a view of " + formatShape(global));
  ElementFill fill{spec, initTensorKey(seed, spec.name),
                   spec.shape.empty() ? 1 : spec.shape.back()};
  size_t width = sizeOf(spec.dtype);
  auto *bytes = static_cast<uint8_t *>(out);
  // The box walk of copyBox: each plane's source offsets are the
  // elements' flat indices in the global tensor.
  forEachBoxPlane(global, offsets, box, Shape(box.size(), 0), box, width,
                  [&](const BoxPlane &plane) {
                    int64_t run = static_cast<int64_t>(plane.runBytes / width);
                    int64_t count = static_cast<int64_t>(plane.rows) * run;
#pragma omp parallel for schedule(static) if (count > 65536)
                    for (int64_t e = 0; e < count; ++e) {
                      int64_t row = e / run, col = e % run;
                      uint64_t index =
                          (plane.srcOffset + row * plane.srcPitch) / width +
                          static_cast<uint64_t>(col);
                      fill(index, bytes + plane.dstOffset +
                                      row * plane.dstPitch + col * width);
                    }
                  });
}

void fillInit(const InitSpec &spec, uint64_t seed, void *out) {
  fillInitBox(spec, seed, spec.shape, Shape(spec.shape.size(), 0), spec.shape,
              out);
}

} // namespace bmrt
