//===- GradientBuckets.cpp - gradient reduction during the backward -------===//

#include "GradientBuckets.h"
#include "Clock.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

namespace bmrt {

namespace {

/// `length` elements of `base` from element `begin`, as a flat view.
TensorView flatAt(void *base, DType dtype, size_t begin, size_t length) {
  TensorView v;
  v.data = static_cast<char *>(base) + begin * sizeOf(dtype);
  v.dtype = dtype;
  v.shape = {static_cast<int64_t>(length)};
  return v;
}

/// The tensor a parameter's reduction reads and writes without ZeRO 2 and
/// 3: the micro-batches' sum where there is one, else the gradient.
const TensorView &summed(const ParamSlot &p) {
  return p.accumulated.data ? p.accumulated : p.grad;
}

} // namespace

GradientBuckets::GradientBuckets(std::vector<ParamSlot> &params, int stage,
                                 Executor &executor, Device &device,
                                 size_t thresholdBytes,
                                 ReductionOf reductionOf, TimeSink addTime)
    : executor(executor), device(device), addTime(std::move(addTime)) {
  build(params, stage, std::max<size_t>(thresholdBytes, 1), reductionOf);
  for (Bucket &bucket : buckets)
    allocate(bucket);
}

GradientBuckets::~GradientBuckets() {
  for (Bucket &bucket : buckets)
    if (bucket.buffer)
      device.deallocate(bucket.buffer, bucket.bufferBytes,
                        MemoryKind::Workspace);
}

/// Parameters in the order their gradients become final, into one open
/// bucket per kind of collective (group, reduce-scatter or not, element
/// type), closed at the threshold; a gradient of at least the threshold is
/// a bucket of its own.
void GradientBuckets::build(std::vector<ParamSlot> &params, int stage,
                            size_t thresholdBytes,
                            const ReductionOf &reductionOf) {
  const Program &program = executor.program();
  std::vector<int> writer = lastWriters(program);
  std::vector<std::pair<int, ParamSlot *>> order;
  for (ParamSlot &p : params) {
    if (p.stage != stage || !p.grad.data)
      continue;
    int grad = program.gradientOf(p.slot);
    if (grad >= 0 && writer[grad] >= 0)
      order.push_back({writer[grad], &p});
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  using Key = std::tuple<std::string, bool, DType>;
  std::map<Key, Bucket> open;
  auto close = [&](Bucket &bucket) {
    if (!bucket.params.empty())
      buckets.push_back(std::move(bucket));
    bucket = Bucket();
  };
  for (auto [index, p] : order) {
    GradientReduction reduction = reductionOf(*p);
    if (!reduction.comm)
      continue;
    Key key{reduction.group, reduction.scatter, p->grad.dtype};
    Bucket alone;
    size_t bytes = p->grad.bytes();
    Bucket &bucket = bytes >= thresholdBytes ? alone : open[key];
    bucket.reduction = reduction;
    bucket.dtype = p->grad.dtype;
    bucket.params.push_back(p);
    bucket.offsets.push_back(bucket.count);
    bucket.count += reduction.scatter ? p->chunk : p->grad.size();
    bucket.gradientBytes += bytes;
    bucket.finalAfter = static_cast<size_t>(index);
    covered.insert(p);
    if (bucket.gradientBytes >= thresholdBytes)
      close(bucket);
  }
  for (auto &[key, bucket] : open)
    close(bucket);
  // Closed at the threshold in order; the rest at the end: start them in
  // the order they become final.
  std::stable_sort(buckets.begin(), buckets.end(),
                   [](const Bucket &a, const Bucket &b) {
                     return a.finalAfter < b.finalAfter;
                   });
}

void GradientBuckets::allocate(Bucket &bucket) {
  size_t blocks = bucket.reduction.scatter ? bucket.reduction.comm->size() + 1
                                           : 1;
  bucket.bufferBytes = blocks * bucket.count * sizeOf(bucket.dtype);
  bucket.buffer =
      device.allocate(std::max<size_t>(bucket.bufferBytes, 1),
                      MemoryKind::Workspace);
  // The chunks' padding past each gradient's end is never written: zero
  // once, as reduceGradient pads with zeros.
  device.fillBytes(bucket.buffer, 0, bucket.bufferBytes, executor.stream());
}

template <typename F>
void GradientBuckets::timed(const Bucket &bucket, F call) {
  auto begin = std::chrono::steady_clock::now();
  call();
  addTime(bucket.reduction.group, secondsSince(begin));
}

void GradientBuckets::arm(bool startsSumNow) {
  BMRT_CHECK(!armed, "gradient buckets armed twice without finish()");
  armed = true;
  startsSum = startsSumNow;
  next = 0;
}

void GradientBuckets::afterInstruction(size_t index) {
  if (!armed)
    return;
  while (next < buckets.size() && buckets[next].finalAfter <= index)
    start(buckets[next++], index);
  for (size_t b = 0; b < next; ++b)
    if (!buckets[b].pending.complete())
      timed(buckets[b], [&] { buckets[b].pending.test(); });
}

void GradientBuckets::start(Bucket &bucket, size_t index) {
  if (&bucket == &buckets.front())
    windowBegin = std::chrono::steady_clock::now();
  bucket.startedAfter = index;
  pack(bucket);
  Stream &stream = executor.stream();
  timed(bucket, [&] {
    Communicator &comm = *bucket.reduction.comm;
    if (bucket.reduction.scatter)
      bucket.pending = comm.reduceScatterAsync(bucket.buffer, result(bucket),
                                               bucket.count, bucket.dtype,
                                               stream);
    else
      bucket.pending = comm.allReduceAsync(bucket.buffer, bucket.buffer,
                                           bucket.count, bucket.dtype, stream);
  });
}

/// Copies the bucket's gradients into its buffer: back to back, or each
/// one's chunk r into block r.
void GradientBuckets::pack(Bucket &bucket) {
  Stream &stream = executor.stream();
  for (size_t i = 0; i < bucket.params.size(); ++i) {
    ParamSlot &p = *bucket.params[i];
    if (!bucket.reduction.scatter) {
      // The last micro-batch's accumulate(), done here.
      if (p.accumulated.data)
        kernels().add(stream, p.accumulated, p.grad, p.accumulated);
      const TensorView &g = summed(p);
      copyView(flatAt(g.data, g.dtype, 0, g.size()),
               flatAt(bucket.buffer, bucket.dtype, bucket.offsets[i],
                      g.size()));
      continue;
    }
    int64_t n = p.grad.size();
    for (int r = 0; r < bucket.reduction.comm->size(); ++r) {
      int64_t begin = std::min(n, r * p.chunk);
      int64_t length = std::min(n - begin, p.chunk);
      if (length > 0)
        copyView(flatAt(p.grad.data, p.grad.dtype, begin, length),
                 flatAt(bucket.buffer, bucket.dtype,
                        r * bucket.count + bucket.offsets[i], length));
    }
  }
}

/// Where the collective leaves the sums: in place for an all-reduce, after
/// the dp blocks for a reduce-scatter.
void *GradientBuckets::result(const Bucket &bucket) {
  size_t blocks = bucket.reduction.scatter ? bucket.reduction.comm->size() : 0;
  return flatAt(bucket.buffer, bucket.dtype, blocks * bucket.count, 0).data;
}

/// Writes the sums back: each gradient (or its sum), or each shard's chunk
/// into the shard's sum.
void GradientBuckets::unpack(Bucket &bucket) {
  Stream &stream = executor.stream();
  for (size_t i = 0; i < bucket.params.size(); ++i) {
    ParamSlot &p = *bucket.params[i];
    if (!bucket.reduction.scatter) {
      const TensorView &g = summed(p);
      copyView(flatAt(result(bucket), bucket.dtype, bucket.offsets[i],
                      g.size()),
               flatAt(g.data, g.dtype, 0, g.size()));
      continue;
    }
    TensorView chunk =
        flatAt(result(bucket), bucket.dtype, bucket.offsets[i], p.chunk);
    TensorView sum = flatAt(p.accumulated.data, p.accumulated.dtype, 0, p.chunk);
    if (startsSum)
      copyView(chunk, sum);
    else
      kernels().add(stream, sum, chunk, sum);
  }
}

void GradientBuckets::finish() {
  if (!armed)
    return;
  // A program whose last writers lie past its end never reaches them.
  while (next < buckets.size())
    start(buckets[next++], executor.program().instrs.size());
  for (Bucket &bucket : buckets)
    timed(bucket, [&] { bucket.pending.wait(); });
  if (!buckets.empty())
    window += secondsSince(windowBegin);
  for (Bucket &bucket : buckets)
    unpack(bucket);
  executor.stream().synchronize();
  armed = false;
}

std::vector<size_t> GradientBuckets::startedAfter() const {
  std::vector<size_t> indices;
  for (const Bucket &bucket : buckets)
    indices.push_back(bucket.startedAfter);
  return indices;
}

std::vector<size_t> GradientBuckets::finalAfter() const {
  std::vector<size_t> indices;
  for (const Bucket &bucket : buckets)
    indices.push_back(bucket.finalAfter);
  return indices;
}

double GradientBuckets::takeOverlapWindow() {
  double seconds = window;
  window = 0;
  return seconds;
}

} // namespace bmrt
