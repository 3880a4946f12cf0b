//===- GradientBucketsTest.cpp - reductions start during the backward -----===//
//
// A step program whose gradients become final at different instructions,
// run by the executor with the buckets on its instruction hook, over a
// communicator that records when each collective starts and stands in for
// a second rank holding the same gradients (so a sum doubles each value).

#include "GradientBuckets.h"

#include "bmrt/Backend.h"
#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace bmrt {
namespace {

// Gradient a is final after instruction 0, b after instruction 3; the last
// instruction is 4.
const char *kProgram = R"(bmc-step-program 1
model "buckets"
slot %0 input f32[4] "x"
slot %1 param f32[4] "a"
slot %2 grad f32[4] "a"
slot %3 param f32[3] "b"
slot %4 grad f32[3] "b"
slot %5 value f32[4]
slot %6 value f32[]
slot %7 const f32[3] = 1 2 3
slot %8 value f32[4]
%2 = relu %0
%5 = mul %0, %1
%6 = reduce_sum %5 {axes=[0]}
%4 = relu %7
%8 = relu %0
loss %6
)";

/// Rank 0 of a group of two whose other rank holds the same data: sums are
/// twice the values. A collective completes at its second test (or wait);
/// each records the instruction the executor last ran when it started.
class TwinCommunicator final : public Communicator {
public:
  TwinCommunicator() : Communicator("dp", 0, 2) {}
  size_t current = 0;
  std::vector<size_t> startedAt;
  int completedByTest = 0;

protected:
  struct Twice final : PendingCollective::Operation {
    Twice(TwinCommunicator &owner, const float *send, float *recv, size_t n)
        : owner(owner), send(send), recv(recv), count(n) {}
    bool test() override {
      if (++tests < 2)
        return false;
      ++owner.completedByTest;
      finish();
      return true;
    }
    void wait() override { finish(); }
    void finish() {
      for (size_t i = 0; i < count; ++i)
        recv[i] = 2 * send[i];
    }
    TwinCommunicator &owner;
    const float *send;
    float *recv;
    size_t count;
    int tests = 0;
  };
  std::unique_ptr<PendingCollective::Operation>
  doAllReduceAsync(const void *send, void *recv, size_t count, DType,
                   Stream &) override {
    startedAt.push_back(current);
    return std::make_unique<Twice>(*this, static_cast<const float *>(send),
                                   static_cast<float *>(recv), count);
  }
  // Rank 0 keeps block 0.
  std::unique_ptr<PendingCollective::Operation>
  doReduceScatterAsync(const void *send, void *recv, size_t recvCount,
                       DType type, Stream &stream) override {
    return doAllReduceAsync(send, recv, recvCount, type, stream);
  }
  void doAllReduce(const void *, void *, size_t, DType, Stream &) override {}
  void doReduceScatter(const void *, void *, size_t, DType, Stream &) override {}
  void doAllGather(const void *, void *, size_t, DType, Stream &) override {}
  void doAllToAll(const void *, void *, size_t, DType, Stream &) override {}
  void doSend(const void *, size_t, DType, int, bool, Stream &) override {}
  void doRecv(void *, size_t, DType, int, bool, Stream &) override {}
  void doGroupEnd() override {}
  void doBarrier() override {}
};

struct Fixture {
  std::unique_ptr<Device> device = createDevice("cpu");
  Program program = parseProgram(kProgram, "buckets.bmp");
  Executor executor{program, *device};
  TwinCommunicator comm;
  std::vector<ParamSlot> params;
  std::vector<float> sums[2];

  explicit Fixture(bool scatter) {
    float x[4] = {1, -2, 3, -4};
    std::memcpy(executor.view(0).data, x, sizeof x);
    for (int slot : {1, 3}) {
      ParamSlot p;
      p.slot = slot;
      p.value = executor.view(slot);
      p.grad = executor.view(slot + 1);
      p.partial = {"dp"};
      p.chunk = (p.grad.size() + 1) / 2;
      p.length = p.chunk;
      if (scatter) {
        std::vector<float> &sum = sums[params.size()];
        sum.assign(p.chunk, 0);
        p.accumulated = {sum.data(), DType::F32, {p.chunk}};
      }
      params.push_back(p);
    }
  }

  std::unique_ptr<GradientBuckets> buckets(size_t threshold, bool scatter) {
    auto made = std::make_unique<GradientBuckets>(
        params, 0, executor, *device, threshold,
        [&, scatter](const ParamSlot &) {
          return GradientReduction{&comm, "dp", scatter};
        },
        [](const std::string &, double) {});
    GradientBuckets *raw = made.get();
    executor.setInstructionHook([this, raw](size_t index) {
      comm.current = index;
      raw->afterInstruction(index);
    });
    return made;
  }

  std::vector<float> read(int slot) {
    const TensorView &v = executor.view(slot);
    const float *data = static_cast<const float *>(v.data);
    return std::vector<float>(data, data + v.size());
  }
};

TEST(GradientBuckets, EachStartsOnceItsGradientsAreFinal) {
  Fixture f(false);
  auto buckets = f.buckets(1, false); // every gradient its own bucket
  ASSERT_EQ(buckets->size(), 2u);
  EXPECT_EQ(buckets->finalAfter(), (std::vector<size_t>{0, 3}));
  buckets->arm(true);
  f.executor.run();
  // Started in program order, before the backward's last instruction (4).
  EXPECT_EQ(f.comm.startedAt, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(buckets->startedAfter(), (std::vector<size_t>{0, 3}));
  // Both were tested between the instructions after them, to completion.
  EXPECT_EQ(f.comm.completedByTest, 2);
  buckets->finish();
  EXPECT_EQ(f.read(2), (std::vector<float>{2, 0, 6, 0}));
  EXPECT_EQ(f.read(4), (std::vector<float>{2, 4, 6}));
}

TEST(GradientBuckets, UnarmedRunsStartNothing) {
  Fixture f(false);
  auto buckets = f.buckets(1, false);
  f.executor.run();
  buckets->finish();
  EXPECT_TRUE(f.comm.startedAt.empty());
  EXPECT_EQ(f.read(4), (std::vector<float>{1, 2, 3}));
}

TEST(GradientBuckets, ThresholdGroupsGradientsUntilTheLastIsFinal) {
  Fixture f(false);
  auto buckets = f.buckets(1 << 20, false);
  ASSERT_EQ(buckets->size(), 1u);
  buckets->arm(true);
  f.executor.run();
  EXPECT_EQ(f.comm.startedAt, (std::vector<size_t>{3}));
  buckets->finish();
  EXPECT_EQ(f.read(2), (std::vector<float>{2, 0, 6, 0}));
  EXPECT_EQ(f.read(4), (std::vector<float>{2, 4, 6}));
}

TEST(GradientBuckets, ReduceScatterKeepsEachChunkPaddedAndSums) {
  Fixture f(true);
  auto buckets = f.buckets(1 << 20, true);
  ASSERT_EQ(buckets->size(), 1u);
  // Block 0 is the first chunk of each gradient: a [1, 0], b [1, 2].
  buckets->arm(true);
  f.executor.run();
  buckets->finish();
  EXPECT_EQ(f.sums[0], (std::vector<float>{2, 0}));
  EXPECT_EQ(f.sums[1], (std::vector<float>{2, 4}));
  // A second micro-batch adds to the sums.
  buckets->arm(false);
  f.executor.run();
  buckets->finish();
  EXPECT_EQ(f.sums[0], (std::vector<float>{4, 0}));
  EXPECT_EQ(f.sums[1], (std::vector<float>{4, 8}));
}

TEST(GradientBuckets, ArmingTwiceIsAnError) {
  Fixture f(false);
  auto buckets = f.buckets(1, false);
  buckets->arm(true);
  EXPECT_THROW(buckets->arm(true), Error);
  f.executor.run();
  buckets->finish();
}

} // namespace
} // namespace bmrt
