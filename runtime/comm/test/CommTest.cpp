//===- CommTest.cpp - meshes, collectives and point-to-point --------------===//
//
// Run on 1 (with and without MPI), 2 and 4 ranks. Rank r contributes values
// derived from r + 1, and every result is compared with the one computed
// here from the same formula. The values are small multiples of 1/4 (F32)
// or exceed 32 bits (I64), so sums are exact and a narrowed type shows.
//
//===----------------------------------------------------------------------===//

#include "CommTestSupport.h"

#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

using namespace bmrt;
using namespace bmrt::test;

namespace {

/// Rank r's element i: exact in both types, different for every (r, i).
float f32Value(int rank, size_t i) { return (rank + 1) + 0.25f * i; }
int64_t i64Value(int rank, size_t i) {
  return (rank + 1) * (int64_t(1) << 33) + static_cast<int64_t>(i);
}

template <typename T> DType dtypeOf();
template <> DType dtypeOf<float>() { return DType::F32; }
template <> DType dtypeOf<int64_t>() { return DType::I64; }
template <> DType dtypeOf<int32_t>() { return DType::I32; }

template <typename T> T valueOf(int rank, size_t i);
template <> float valueOf<float>(int rank, size_t i) {
  return f32Value(rank, i);
}
template <> int64_t valueOf<int64_t>(int rank, size_t i) {
  return i64Value(rank, i);
}
template <> int32_t valueOf<int32_t>(int rank, size_t i) {
  return (rank + 1) * 1000 + static_cast<int32_t>(i);
}

template <typename T> std::vector<T> valuesOf(int rank, size_t count) {
  std::vector<T> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = valueOf<T>(rank, i);
  return values;
}

/// Sum over ranks 0 .. n-1 of valueOf(r, i).
template <typename T> T sumOf(int n, size_t i) {
  T sum = 0;
  for (int r = 0; r < n; ++r)
    sum += valueOf<T>(r, i);
  return sum;
}

/// Throws unless `call` throws a bmrt::Error whose text contains `part`.
template <typename F> void expectError(F call, const std::string &part) {
  try {
    call();
    ADD_FAILURE() << "no bmrt::Error; expected one saying '" << part << "'";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
        << "the error was: " << e.what();
  }
}

Stream &stream() { return testDevice().computeStream(); }

//===----------------------------------------------------------------------===//
// Mesh arithmetic: no communication
//===----------------------------------------------------------------------===//

TEST(MeshTest, PlanNumbersTpInnermostThenDpThenPp) {
  Mesh mesh = Mesh::fromPlan({{"dp", 2}, {"tp", 2}, {"pp", 2}});
  EXPECT_EQ(mesh.str(), "tp=2,ep=1,dp=2,pp=2");
  EXPECT_EQ(mesh.numRanks(), 8);
  // Rank 5 = tp 1 + dp 0 * 2 + pp 1 * 4.
  EXPECT_EQ(mesh.coordinates(5), (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(mesh.coordinate(6, "dp"), 1);
  EXPECT_EQ(mesh.rankAt({1, 0, 1, 1}), 7);
  EXPECT_EQ(mesh.groupRanks(5, {"tp"}), (std::vector<int>{4, 5}));
  EXPECT_EQ(mesh.groupRanks(5, {"dp"}), (std::vector<int>{5, 7}));
  EXPECT_EQ(mesh.groupRanks(5, {"pp"}), (std::vector<int>{1, 5}));
  EXPECT_EQ(mesh.groupRanks(5, {"ep"}), (std::vector<int>{5}));
  // Group order follows the mesh, not the order the axes are named in.
  EXPECT_EQ(mesh.groupRanks(5, {"dp", "tp"}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(mesh.groupRanks(5, {"tp", "dp"}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(mesh.groupRanks(2, {"tp", "pp"}), (std::vector<int>{2, 3, 6, 7}));
}

TEST(MeshTest, ExpertAxisIsTheInnermostPartOfDp) {
  // bm.mesh's dp is the plan's dp / ep: a plan with dp=4, ep=2, tp=2.
  Mesh mesh = Mesh::fromPlan({{"dp", 2}, {"ep", 2}, {"tp", 2}});
  EXPECT_EQ(mesh.numRanks(), 8);
  // Rank 6 = tp 0 + ep 1 * 2 + dp 1 * 4.
  EXPECT_EQ(mesh.groupRanks(6, {"ep"}), (std::vector<int>{4, 6}));
  EXPECT_EQ(mesh.groupRanks(6, {"dp"}), (std::vector<int>{2, 6}));
  EXPECT_EQ(mesh.groupRanks(6, {"ep", "dp"}), (std::vector<int>{0, 2, 4, 6}));
}

TEST(MeshTest, BadMeshesAndQuestionsThrow) {
  expectError([] { Mesh::fromPlan({{"sp", 2}}); }, "unknown mesh axis 'sp'");
  expectError([] { Mesh::fromPlan({{"dp", 0}}); }, "'dp' has size 0");
  expectError([] { Mesh({{"dp", 2}, {"dp", 2}}); }, "'dp' appears twice");
  Mesh mesh = Mesh::fromPlan({{"dp", 2}});
  expectError([&] { mesh.groupRanks(0, {"dp", "dp"}); }, "named twice");
  expectError([&] { mesh.groupRanks(0, {"xp"}); }, "has no axis 'xp'");
  expectError([&] { mesh.coordinates(2); }, "rank 2 is not on the mesh");
}

//===----------------------------------------------------------------------===//
// The world
//===----------------------------------------------------------------------===//

TEST(WorldTest, BackendFollowsTheLauncher) {
  const char *forced = std::getenv("BMRT_COMM");
  std::string expected = forced                                ? forced
                         : std::getenv("OMPI_COMM_WORLD_SIZE") ? "mpi"
                                                               : "local";
  EXPECT_EQ(testWorld().backend(), expected);
}

TEST(WorldTest, AllRanksInWorldOrder) {
  auto all = allRanks();
  EXPECT_EQ(all->size(), testWorld().size());
  EXPECT_EQ(all->rank(), testWorld().rank());
  EXPECT_EQ(all->name(), "world");
}

TEST(WorldTest, MeshMustHaveTheJobsRanks) {
  int n = testWorld().size();
  Mesh mesh = Mesh::fromPlan({{"dp", n + 1}});
  expectError([&] { testWorld().group(mesh, "dp"); },
              "has " + std::to_string(n + 1) + " ranks but the job has " +
                  std::to_string(n));
}

TEST(WorldTest, GroupAlongTheWholeMeshIsTheWorld) {
  int n = testWorld().size();
  auto dp = staged(testWorld().group(Mesh::fromPlan({{"dp", n}}), "dp"));
  EXPECT_EQ(dp->size(), n);
  EXPECT_EQ(dp->rank(), testWorld().rank());
  EXPECT_EQ(dp->name(), "dp");
}

//===----------------------------------------------------------------------===//
// Collectives over all ranks, each element type, in and out of place
//===----------------------------------------------------------------------===//

template <typename T> void checkAllReduce(bool inPlace) {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  const size_t count = 37;
  DeviceBuffer<T> send(valuesOf<T>(r, count)), recv(count);
  T *out = inPlace ? send.data() : recv.data();
  comm->allReduce(send.data(), out, count, dtypeOf<T>(), stream());
  std::vector<T> got = inPlace ? send.read() : recv.read();
  for (size_t i = 0; i < count; ++i)
    ASSERT_EQ(got[i], sumOf<T>(n, i)) << "element " << i;
  if (!inPlace) {
    EXPECT_EQ(send.read(), valuesOf<T>(r, count)) << "the input changed";
  }
}

TEST(CollectiveTest, AllReduceF32) { checkAllReduce<float>(false); }
TEST(CollectiveTest, AllReduceF32InPlace) { checkAllReduce<float>(true); }
TEST(CollectiveTest, AllReduceI64) { checkAllReduce<int64_t>(false); }
TEST(CollectiveTest, AllReduceI64InPlace) { checkAllReduce<int64_t>(true); }
TEST(CollectiveTest, AllReduceI32) { checkAllReduce<int32_t>(false); }

template <typename T> void checkReduceScatter(bool inPlace) {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  const size_t chunk = 5;
  DeviceBuffer<T> send(valuesOf<T>(r, n * chunk)), recv(chunk);
  T *out = inPlace ? send.data(r * chunk) : recv.data();
  comm->reduceScatter(send.data(), out, chunk, dtypeOf<T>(), stream());
  std::vector<T> got = inPlace ? send.read() : recv.read();
  size_t at = inPlace ? r * chunk : 0;
  for (size_t i = 0; i < chunk; ++i)
    ASSERT_EQ(got[at + i], sumOf<T>(n, r * chunk + i)) << "element " << i;
}

TEST(CollectiveTest, ReduceScatterF32) { checkReduceScatter<float>(false); }
TEST(CollectiveTest, ReduceScatterF32InPlace) {
  checkReduceScatter<float>(true);
}
TEST(CollectiveTest, ReduceScatterI64) { checkReduceScatter<int64_t>(false); }
TEST(CollectiveTest, ReduceScatterI64InPlace) {
  checkReduceScatter<int64_t>(true);
}

// Nonblocking: several in flight at once on one group, of both kinds, in
// and out of place; some completed by test() alone, the rest by wait().
TEST(CollectiveTest, AsyncAllReduceAndReduceScatterInFlightTogether) {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  const size_t count = 37, chunk = 5;
  DeviceBuffer<float> sum(valuesOf<float>(r, count)), sumOut(count);
  DeviceBuffer<int64_t> sumInPlace(valuesOf<int64_t>(r, count));
  DeviceBuffer<float> scatter(valuesOf<float>(r, n * chunk)), scatterOut(chunk);
  DeviceBuffer<float> scatterInPlace(valuesOf<float>(r, n * chunk));
  std::vector<PendingCollective> pending;
  pending.push_back(comm->allReduceAsync(sum.data(), sumOut.data(), count,
                                         DType::F32, stream()));
  pending.push_back(comm->allReduceAsync(sumInPlace.data(), sumInPlace.data(),
                                         count, DType::I64, stream()));
  pending.push_back(comm->reduceScatterAsync(
      scatter.data(), scatterOut.data(), chunk, DType::F32, stream()));
  pending.push_back(comm->reduceScatterAsync(scatterInPlace.data(),
                                             scatterInPlace.data(r * chunk),
                                             chunk, DType::F32, stream()));
  // The first by testing only (it completes: every rank keeps calling MPI).
  while (!pending[0].test()) {
  }
  EXPECT_TRUE(pending[0].test()) << "a complete collective stays complete";
  for (PendingCollective &p : pending)
    p.wait();
  std::vector<float> gotSum = sumOut.read(), gotScatter = scatterOut.read(),
                     gotInPlace = scatterInPlace.read();
  std::vector<int64_t> gotI64 = sumInPlace.read();
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(gotSum[i], sumOf<float>(n, i)) << "element " << i;
    ASSERT_EQ(gotI64[i], sumOf<int64_t>(n, i)) << "element " << i;
  }
  for (size_t i = 0; i < chunk; ++i) {
    ASSERT_EQ(gotScatter[i], sumOf<float>(n, r * chunk + i)) << i;
    ASSERT_EQ(gotInPlace[r * chunk + i], sumOf<float>(n, r * chunk + i)) << i;
  }
}

TEST(CollectiveTest, AsyncCollectivesCheckTheirArgumentsAlike) {
  auto comm = allRanks();
  DeviceBuffer<float> buffer(4 * comm->size());
  float *data = buffer.data();
  expectError(
      [&] { comm->allReduceAsync(data, data, 4, DType::Bool, stream()); },
      "sums of i1 are not supported");
  expectError(
      [&] { comm->allReduceAsync(data, data + 1, 2, DType::F32, stream()); },
      "buffers overlap");
  expectError(
      [&] { comm->reduceScatterAsync(data, data + 1, 2, DType::F32, stream()); },
      "buffers overlap other than in place");
}

template <typename T> void checkAllGather(bool inPlace) {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  const size_t chunk = 3;
  DeviceBuffer<T> send(valuesOf<T>(r, chunk));
  std::vector<T> start(n * chunk, T(-1));
  if (inPlace)
    std::copy_n(valuesOf<T>(r, chunk).begin(), chunk,
                start.begin() + r * chunk);
  DeviceBuffer<T> recv(start);
  const T *in = inPlace ? recv.data(r * chunk) : send.data();
  comm->allGather(in, recv.data(), chunk, dtypeOf<T>(), stream());
  std::vector<T> got = recv.read();
  for (int from = 0; from < n; ++from)
    for (size_t i = 0; i < chunk; ++i)
      ASSERT_EQ(got[from * chunk + i], valueOf<T>(from, i))
          << "chunk of rank " << from << ", element " << i;
}

TEST(CollectiveTest, AllGatherF32) { checkAllGather<float>(false); }
TEST(CollectiveTest, AllGatherF32InPlace) { checkAllGather<float>(true); }
TEST(CollectiveTest, AllGatherI64) { checkAllGather<int64_t>(false); }
TEST(CollectiveTest, AllGatherI64InPlace) { checkAllGather<int64_t>(true); }

template <typename T> void checkAllToAll() {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  const size_t chunk = 4;
  // Element i of chunk j on rank r: valueOf(r, j * chunk + i), bound for j.
  DeviceBuffer<T> send(valuesOf<T>(r, n * chunk)), recv(n * chunk);
  comm->allToAll(send.data(), recv.data(), chunk, dtypeOf<T>(), stream());
  std::vector<T> got = recv.read();
  for (int from = 0; from < n; ++from)
    for (size_t i = 0; i < chunk; ++i)
      ASSERT_EQ(got[from * chunk + i], valueOf<T>(from, r * chunk + i))
          << "chunk from rank " << from << ", element " << i;
}

TEST(CollectiveTest, AllToAllF32) { checkAllToAll<float>(); }
TEST(CollectiveTest, AllToAllI64) { checkAllToAll<int64_t>(); }

TEST(CollectiveTest, BarrierAndEmptyBuffers) {
  auto comm = allRanks();
  comm->barrier();
  comm->allReduce(nullptr, nullptr, 0, DType::F32, stream());
  comm->allGather(nullptr, nullptr, 0, DType::I64, stream());
}

//===----------------------------------------------------------------------===//
// Point-to-point
//===----------------------------------------------------------------------===//

TEST(PointToPointTest, BlockingBetweenNeighbourPairs) {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  if (n < 2)
    GTEST_SKIP() << "needs two ranks";
  // Pairs (0, 1), (2, 3), ...: the even rank sends first, the odd one
  // receives first, so blocking calls cannot deadlock. A last odd rank out.
  int peer = r % 2 == 0 ? r + 1 : r - 1;
  if (peer >= n)
    return;
  const size_t count = 9;
  DeviceBuffer<int64_t> mine(valuesOf<int64_t>(r, count)), theirs(count);
  if (r % 2 == 0) {
    comm->send(mine.data(), count, DType::I64, peer, stream());
    comm->recv(theirs.data(), count, DType::I64, peer, stream());
  } else {
    comm->recv(theirs.data(), count, DType::I64, peer, stream());
    comm->send(mine.data(), count, DType::I64, peer, stream());
  }
  EXPECT_EQ(theirs.read(), valuesOf<int64_t>(peer, count));
}

TEST(PointToPointTest, GroupedRingCannotDeadlock) {
  // Every rank sends before it receives, with messages far over MPI's eager
  // limit: blocking sends would all wait; grouped, they complete. On one
  // rank this is a message to itself.
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  const size_t count = size_t(1) << 20;
  DeviceBuffer<float> mine(valuesOf<float>(r, count)), theirs(count);
  int next = (r + 1) % n, previous = (r + n - 1) % n;
  comm->groupStart();
  comm->send(mine.data(), count, DType::F32, next, stream());
  comm->recv(theirs.data(), count, DType::F32, previous, stream());
  comm->groupEnd();
  EXPECT_EQ(theirs.read(), valuesOf<float>(previous, count));
}

//===----------------------------------------------------------------------===//
// Misuse and transfer errors become bmrt::Error, alike on every rank
//===----------------------------------------------------------------------===//

TEST(CommErrorTest, RefusedBeforeAnyCommunication) {
  auto comm = allRanks();
  int n = comm->size(), r = comm->rank();
  DeviceBuffer<float> buffer(4 * n);
  float *data = buffer.data();
  expectError([&] { comm->allReduce(data, data, 4, DType::Bool, stream()); },
              "all-reduce over world (rank " + std::to_string(r) + " of " +
                  std::to_string(n) + "): sums of i1 are not supported");
  expectError([&] { comm->allReduce(data, data + 1, 2, DType::F32, stream()); },
              "buffers overlap");
  expectError([&] { comm->allToAll(data, data, 1, DType::F32, stream()); },
              "buffers overlap");
  expectError([&] { comm->send(data, 1, DType::F32, n, stream()); },
              "no rank " + std::to_string(n) + " in the group");
  expectError([&] { comm->recv(data, 1, DType::F32, r, stream()); },
              "with itself outside groupStart / groupEnd never completes");
  comm->groupStart();
  expectError([&] { comm->barrier(); }, "only send and recv group");
  comm->groupEnd();
  expectError([&] { comm->groupEnd(); }, "without a matching groupStart");
}

TEST(CommErrorTest, TooLongAMessageIsAnMpiError) {
  auto comm = allRanks();
  if (comm->size() < 2)
    GTEST_SKIP() << "needs two ranks";
  DeviceBuffer<float> buffer(valuesOf<float>(comm->rank(), 4));
  if (comm->rank() == 0)
    comm->send(buffer.data(), 4, DType::F32, 1, stream());
  if (comm->rank() == 1)
    expectError([&] { comm->recv(buffer.data(), 2, DType::F32, 0, stream()); },
                "MPI_Recv over world (rank 1 of " +
                    std::to_string(comm->size()) +
                    ") with rank 0 failed: MPI_ERR_TRUNCATE");
  comm->barrier();
}

TEST(CommErrorTest, TooShortAMessageIsCaught) {
  auto comm = allRanks();
  if (comm->size() < 2)
    GTEST_SKIP() << "needs two ranks";
  DeviceBuffer<float> buffer(valuesOf<float>(comm->rank(), 4));
  if (comm->rank() == 0)
    comm->send(buffer.data(), 2, DType::F32, 1, stream());
  if (comm->rank() == 1)
    expectError([&] { comm->recv(buffer.data(), 4, DType::F32, 0, stream()); },
                "with rank 0: got 2 elements, expected 4");
  comm->barrier();
}

//===----------------------------------------------------------------------===//
// Groups of a 2 x 2 mesh (dp=2, tp=2): run on 4 ranks
//===----------------------------------------------------------------------===//

class Mesh2x2Test : public ::testing::Test {
protected:
  void SetUp() override {
    if (testWorld().size() != 4)
      GTEST_SKIP() << "needs 4 ranks";
  }
  Mesh mesh = Mesh::fromPlan({{"dp", 2}, {"tp", 2}});
  int r = testWorld().rank();
};

TEST_F(Mesh2x2Test, TpGroupsAreNeighbours) {
  auto tp = staged(testWorld().group(mesh, "tp"));
  EXPECT_EQ(tp->name(), "tp");
  EXPECT_EQ(tp->size(), 2);
  EXPECT_EQ(tp->rank(), r % 2);
  // Members {r - r % 2, r - r % 2 + 1}, contributing world rank + 1.
  DeviceBuffer<int64_t> value(std::vector<int64_t>{r + 1});
  tp->allReduce(value.data(), value.data(), 1, DType::I64, stream());
  int first = r - r % 2;
  EXPECT_EQ(value.read()[0], (first + 1) + (first + 2));
}

TEST_F(Mesh2x2Test, DpGroupsStrideOverTp) {
  auto dp = staged(testWorld().group(mesh, "dp"));
  EXPECT_EQ(dp->size(), 2);
  EXPECT_EQ(dp->rank(), r / 2);
  // Members {r % 2, r % 2 + 2}, in that order.
  DeviceBuffer<float> mine(std::vector<float>{float(r)}), all(2);
  dp->allGather(mine.data(), all.data(), 1, DType::F32, stream());
  EXPECT_EQ(all.read(), (std::vector<float>{float(r % 2), float(r % 2 + 2)}));
}

TEST_F(Mesh2x2Test, ReduceScatterOverTpThenAllGatherOverDp) {
  auto tp = staged(testWorld().group(mesh, "tp"));
  auto dp = staged(testWorld().group(mesh, "dp"));
  // ZeRO's pattern in miniature: each tp rank keeps its half of the tp sum,
  // then the dp ranks share their halves.
  DeviceBuffer<float> send(valuesOf<float>(r, 4)), half(2), gathered(4);
  tp->reduceScatter(send.data(), half.data(), 2, DType::F32, stream());
  dp->allGather(half.data(), gathered.data(), 2, DType::F32, stream());
  std::vector<float> got = gathered.read();
  int tpRank = r % 2;
  for (int d = 0; d < 2; ++d) {
    int first = 2 * d; // the tp group of dp rank d
    for (size_t i = 0; i < 2; ++i) {
      size_t element = tpRank * 2 + i;
      EXPECT_EQ(got[d * 2 + i],
                f32Value(first, element) + f32Value(first + 1, element))
          << "dp rank " << d << ", element " << i;
    }
  }
}

TEST_F(Mesh2x2Test, BothAxesMakeTheWorldAndPpIsAlone) {
  auto both = testWorld().group(mesh, {"tp", "dp"});
  EXPECT_EQ(both->name(), "tp+dp");
  EXPECT_EQ(both->size(), 4);
  EXPECT_EQ(both->rank(), r);
  auto pp = testWorld().group(mesh, "pp");
  EXPECT_EQ(pp->size(), 1);
  EXPECT_EQ(pp->rank(), 0);
}

TEST_F(Mesh2x2Test, SendRecvWithinTheTpPair) {
  auto tp = staged(testWorld().group(mesh, "tp"));
  int peer = 1 - tp->rank();
  DeviceBuffer<int64_t> mine(std::vector<int64_t>{int64_t(r) << 40}), theirs(1);
  tp->groupStart();
  tp->recv(theirs.data(), 1, DType::I64, peer, stream());
  tp->send(mine.data(), 1, DType::I64, peer, stream());
  tp->groupEnd();
  int peerWorldRank = r - r % 2 + peer;
  EXPECT_EQ(theirs.read()[0], int64_t(peerWorldRank) << 40);
}

} // namespace
