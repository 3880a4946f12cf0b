//===- CasesPool.cpp - max, average and global pooling --------------------===//
//
// 2-D windows with pads and strides, overlapping (so that the backward
// accumulates), and 1-D; continuous random inputs, so no window has two
// maxima (max_pool_grad sends dy to the first one). Averages over at most
// 9 elements: kReduction.
//
//===----------------------------------------------------------------------===//

#include "Runner.h"

namespace bmrt::conformance {
namespace {

/// x [2,3,7,6], kernel 3x2, strides [2,1], pads [1,0]+[1,1] -> y [2,3,4,6].
const Shape kX = {2, 3, 7, 6}, kY = {2, 3, 4, 6};

Build &window2d(Build &c) {
  return c.ints("kernel_shape", {3, 2})
      .ints("strides", {2, 1})
      .ints("pads", {1, 0, 1, 1});
}

Case pool(const std::string &name, const std::string &op, HostTensor in,
          Shape out, Tolerance tol) {
  Build c(name, op);
  c.in(std::move(in)).out(std::move(out)).tol(tol);
  return window2d(c);
}

} // namespace

std::vector<Case> poolCases() {
  std::vector<Case> cases = {
      pool("avg_pool_2d_pads", "avg_pool", uniform(kX, 601), kY, kReduction),
      pool("avg_pool_grad_2d_pads", "avg_pool_grad", uniform(kY, 602), kX,
           kReduction),
      Build("global_avg_pool_2d", "global_avg_pool")
          .in(uniform({2, 3, 5, 4}, 603))
          .out({2, 3, 1, 1})
          .tol(kReduction),
      Build("max_pool_1d", "max_pool")
          .in(uniform({2, 3, 11}, 604))
          .out({2, 3, 5})
          .ints("kernel_shape", {3})
          .ints("strides", {2})
          .ints("pads", {0, 0}),
      pool("max_pool_2d_pads", "max_pool", uniform(kX, 605), kY, kExact),
  };
  // Overlapping windows: a max in two windows gets both dy, summed.
  Build grad("max_pool_grad_2d_pads", "max_pool_grad");
  grad.in(uniform(kX, 606)).in(uniform(kY, 607)).out(kX).tol(kReduction);
  cases.push_back(window2d(grad));
  return cases;
}

} // namespace bmrt::conformance
