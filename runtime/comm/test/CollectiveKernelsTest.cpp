//===- CollectiveKernelsTest.cpp - a step program's collectives, run -------===//
//
// The executor's collective instructions on the job's ranks: a mesh of
// tp = 2 (and dp = 2 on four ranks) and groups listing their axes in
// both orders, so that chunks along dims other than 0 and in an order
// other than the communicator's are covered. Each rank fills its input
// from its rank; the expected results follow from the definitions in
// Program.h, computed here from every rank's input. Exact: data movement,
// and sums of small integers in fp32.
//
//===----------------------------------------------------------------------===//

#include "CommTestSupport.h"

#include "bmrt/Collectives.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Program.h"

#include <gtest/gtest.h>

#include <cstring>

namespace bmrt::test {
namespace {

constexpr int64_t kRows = 4, kCols = 6;

/// Rank r's input, element (i, j).
float input(int r, int64_t i, int64_t j) {
  return float(1000 * r + 10 * i + j);
}

struct Layout {
  int tp = 1, dp = 1;
  int n() const { return tp * dp; }
  int rankOf(int t, int d) const { return t + tp * d; }
  /// The member at chunk k of a group listing "tp,dp" (tp major).
  int tpMajor(int k) const { return rankOf(k / dp, k % dp); }
  /// The member at chunk k of a group listing "dp,tp".
  int dpMajor(int k) const { return rankOf(k % tp, k / tp); }
};

std::string programText(const Layout &l) {
  int n = l.n();
  auto shape = [](int64_t a, int64_t b) {
    return "[" + std::to_string(a) + "," + std::to_string(b) + "]";
  };
  return "bmc-step-program 1\nmodel \"collectives\"\nmesh tp=" +
         std::to_string(l.tp) + " dp=" + std::to_string(l.dp) +
         "\nslot %0 input f32" + shape(kRows, kCols) + " \"x\"\n" +
         "slot %1 value f32" + shape(kRows, kCols) + "\n" +
         "slot %2 value f32" + shape(kRows, kCols * n) + "\n" +
         "slot %3 value f32" + shape(kRows, kCols) + "\n" +
         "slot %4 value f32" + shape(kRows / n, kCols * n) + "\n" +
         "slot %5 value f32" + shape(kRows / n, kCols) + "\n" +
         "%1 = all_reduce %0 {axes=\"tp\"}\n"
         "%2 = all_gather %0 {axes=\"tp,dp\", dim=1}\n"
         "%3 = reduce_scatter %2 {axes=\"dp,tp\", dim=1}\n"
         "%4 = all_to_all %0 {axes=\"tp,dp\", concat_dim=1, split_dim=0}\n"
         "%5 = shard_slice %0 {axes=\"dp,tp\", dim=0}\n"
         "output %1\noutput %2\noutput %3\noutput %4\noutput %5\n";
}

std::vector<float> read(Executor &e, int slot) {
  const TensorView &v = e.view(slot);
  std::vector<float> values(v.size());
  testDevice().copyToHost(values.data(), v.data, v.bytes(), e.stream());
  e.stream().synchronize();
  return values;
}

TEST(CollectiveKernels, MatchTheirDefinitions) {
  World &world = testWorld();
  if (world.size() != 1 && world.size() != 2 && world.size() != 4)
    GTEST_SKIP() << "runs on 1, 2 or 4 ranks";
  Layout l;
  l.tp = world.size() >= 2 ? 2 : 1;
  l.dp = world.size() / l.tp;
  int n = l.n(), r = world.rank();
  int t = r % l.tp, d = r / l.tp;
  Program program = parseProgram(programText(l), "collectives.bmp");
  Collectives collectives(world, Mesh::fromPlan({{"tp", l.tp}, {"dp", l.dp}}),
                          &testDevice());
  Executor e(program, testDevice(), "collectives.bmp", &collectives);
  std::vector<float> x(kRows * kCols);
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j)
      x[i * kCols + j] = input(r, i, j);
  testDevice().copyToDevice(e.view(0).data, x.data(), x.size() * 4, e.stream());
  e.run();

  std::vector<float> sum = read(e, 1), gathered = read(e, 2),
                     scattered = read(e, 3), exchanged = read(e, 4),
                     slice = read(e, 5);
  int64_t rows = kRows / n;
  int tpMajorIndex = t * l.dp + d, dpMajorIndex = d * l.tp + t;
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < kCols; ++j) {
      float all = 0;
      for (int k = 0; k < l.tp; ++k)
        all += input(l.rankOf(k, d), i, j);
      EXPECT_EQ(sum[i * kCols + j], all) << i << "," << j;
      for (int k = 0; k < n; ++k)
        EXPECT_EQ(gathered[i * kCols * n + k * kCols + j],
                  input(l.tpMajor(k), i, j));
      // The gather is the same on every rank: the sum is n times it.
      EXPECT_EQ(scattered[i * kCols + j],
                n * gathered[i * kCols * n + dpMajorIndex * kCols + j]);
    }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < kCols; ++j) {
      for (int k = 0; k < n; ++k)
        EXPECT_EQ(exchanged[i * kCols * n + k * kCols + j],
                  input(l.tpMajor(k), tpMajorIndex * rows + i, j));
      EXPECT_EQ(slice[i * kCols + j], input(r, dpMajorIndex * rows + i, j));
    }
  std::map<std::string, double> times = collectives.takeTimes();
  EXPECT_EQ(times.count("tp"), size_t(l.tp > 1));
}

TEST(CollectiveKernels, NeedTheJobsCommunicators) {
  Program program = parseProgram(
      "bmc-step-program 1\nmodel \"m\"\nmesh tp=1\nslot %0 input f32[2] "
      "\"x\"\nslot %1 value f32[2]\n%1 = all_reduce %0 {axes=\"tp\"}\n"
      "output %1\n",
      "m.bmp");
  Executor e(program, testDevice(), "m.bmp");
  try {
    e.run();
    FAIL() << "ran without communicators";
  } catch (const Error &error) {
    EXPECT_STREQ(error.what(), "'all_reduce' communicates, but this step "
                               "program runs without the job's "
                               "communicators");
  }
}

} // namespace
} // namespace bmrt::test
