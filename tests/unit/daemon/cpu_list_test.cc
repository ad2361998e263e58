// The CPU lists of `xroce link add ... cpus LIST` (include/xroce/cpu_list.h): the forms Linux
// writes (cpuset(7) List format) parse to CPUs, anything else is refused with a reason, and a
// list written back is the one Linux would write.
#include "xroce/cpu_list.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace xroce {
namespace {

using Cpus = std::vector<std::uint32_t>;

Cpus parse(const std::string& text) {
  std::string error;
  Cpus cpus = parse_cpu_list(text, error);
  EXPECT_TRUE(error.empty()) << text << ": " << error;
  return cpus;
}

std::string refusal(const std::string& text) {
  std::string error;
  const Cpus cpus = parse_cpu_list(text, error);
  EXPECT_TRUE(cpus.empty()) << text;
  return error;
}

TEST(CpuList, TheFormsLinuxWritesParse) {
  EXPECT_EQ(parse("1"), (Cpus{1}));
  EXPECT_EQ(parse("0-3"), (Cpus{0, 1, 2, 3}));
  EXPECT_EQ(parse("0,2-3,7"), (Cpus{0, 2, 3, 7}));
  EXPECT_EQ(parse("5-5"), (Cpus{5}));
  EXPECT_EQ(parse("1023"), (Cpus{1023}));
}

TEST(CpuList, RepeatsAndDisorderComeOutAscendingAndOnce) {
  EXPECT_EQ(parse("3,1,2-3,1"), (Cpus{1, 2, 3}));
}

TEST(CpuList, AnythingElseIsRefusedWithTheReason) {
  EXPECT_NE(refusal("").find("empty"), std::string::npos);
  EXPECT_NE(refusal("abc").find("'abc' is not a CPU number"), std::string::npos);
  EXPECT_NE(refusal("1,").find("'' is not a CPU number"), std::string::npos);
  EXPECT_NE(refusal(",1").find("'' is not a CPU number"), std::string::npos);
  EXPECT_NE(refusal("3-1").find("'3-1' is not a range"), std::string::npos);
  EXPECT_NE(refusal("1-").find("'1-' is not a range"), std::string::npos);
  EXPECT_NE(refusal("-1").find("'-1' is not a range"), std::string::npos);
  EXPECT_NE(refusal("0-8:2").find("'0-8:2' is not a range"), std::string::npos);
  EXPECT_NE(refusal(" 1").find("is not a CPU number"), std::string::npos);
  EXPECT_NE(refusal("1024").find("CPU 1024 is past the last one"), std::string::npos);
  EXPECT_NE(refusal("0-4294967295").find("past the last one"), std::string::npos);
  EXPECT_NE(refusal("99999999999").find("is not a CPU number"), std::string::npos);
}

TEST(CpuList, WrittenBackRangesAreJoined) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({1}), "1");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 5}), "0-2,5");
  EXPECT_EQ(format_cpu_list({0, 2, 4}), "0,2,4");
  EXPECT_EQ(format_cpu_list(parse("7,0-1,3-4")), "0-1,3-4,7");
}

TEST(CpuList, TheCallersOwnCpusAreAllowedAndOnePastThemIsNot) {
  const Cpus allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  EXPECT_EQ(first_cpu_not_allowed(allowed), -1);
  const std::uint32_t past = allowed.back() + 1;
  if (past < CPU_SETSIZE) {
    EXPECT_EQ(first_cpu_not_allowed({allowed.front(), past}), static_cast<int>(past));
  }
}

}  // namespace
}  // namespace xroce
