//===- TrainerOptionsTest.cpp - the trainer's --precision, --offload-* ----===//

#include "TrainerOptions.h"

#include "bmrt/Error.h"

#include <gtest/gtest.h>

#include <string>

namespace bmrt {
namespace {

std::string errorOf(const std::vector<std::string> &args) {
  try {
    parseTrainerOptions(args, ".");
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(TrainerOptions, PrecisionDefaultsToThePlans) {
  std::optional<TrainerOptions> o = parseTrainerOptions({}, ".");
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->precision);
}

TEST(TrainerOptions, PrecisionOverridesThePlan) {
  std::optional<TrainerOptions> o =
      parseTrainerOptions({"--precision", "bf16"}, ".");
  ASSERT_TRUE(o && o->precision);
  EXPECT_EQ(*o->precision, ContractionPrecision::BF16);
  o = parseTrainerOptions({"--precision=fp32"}, ".");
  ASSERT_TRUE(o && o->precision);
  EXPECT_EQ(*o->precision, ContractionPrecision::F32);
}

TEST(TrainerOptions, PrecisionRefusesOthers) {
  for (const char *bad : {"fp16", "tf32", "BF16", ""}) {
    std::string error = errorOf({"--precision", bad});
    EXPECT_NE(error.find("--precision must be fp32 or bf16"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find(std::string("got '") + bad + "'"), std::string::npos)
        << error;
  }
  EXPECT_NE(errorOf({"--precision"}).find("needs a value"), std::string::npos);
}

// Unset, the trainer decides by its device (Trainer::updatesBehind); the
// last of the two flags wins, as for --overlap / --no-overlap.
TEST(TrainerOptions, OffloadBehindOrAfter) {
  std::optional<TrainerOptions> o = parseTrainerOptions({}, ".");
  ASSERT_TRUE(o);
  EXPECT_FALSE(o->offloadBehind);
  o = parseTrainerOptions({"--offload-behind"}, ".");
  ASSERT_TRUE(o && o->offloadBehind);
  EXPECT_TRUE(*o->offloadBehind);
  o = parseTrainerOptions({"--offload-behind", "--offload-after"}, ".");
  ASSERT_TRUE(o && o->offloadBehind);
  EXPECT_FALSE(*o->offloadBehind);
}

TEST(ContractionPrecision, NamesRoundTrip) {
  for (ContractionPrecision p :
       {ContractionPrecision::F32, ContractionPrecision::BF16,
        ContractionPrecision::F16}) {
    ContractionPrecision back = ContractionPrecision::F32;
    ASSERT_TRUE(parseContractionPrecision(nameOf(p), back)) << nameOf(p);
    EXPECT_EQ(back, p);
  }
  ContractionPrecision unused;
  EXPECT_FALSE(parseContractionPrecision("fp8", unused));
}

} // namespace
} // namespace bmrt
