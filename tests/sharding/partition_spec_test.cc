#include "vtpu/sharding/partition_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/expect_error.h"
#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"
#include "vtpu/sharding/named_sharding.h"

namespace vtpu {
namespace {

using Entries = std::vector<PartitionSpec::Entry>;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(PartitionSpecTest, CppConstruction) {
  const PartitionSpec empty{};
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(empty.to_string(), "P()");

  const PartitionSpec xy({{"x"}, {"y"}});
  EXPECT_EQ(xy.entries(), (Entries{{"x"}, {"y"}}));
  EXPECT_EQ(xy.to_string(), "P('x', 'y')");

  const PartitionSpec none_y({{}, {"y"}});
  EXPECT_EQ(none_y.size(), 2u);
  EXPECT_TRUE(none_y.entry(0).empty());
  EXPECT_THAT(none_y.entry(1), ElementsAre("y"));
  EXPECT_EQ(none_y.to_string(), "P(None, 'y')");

  const PartitionSpec tuple({{"x", "y"}});
  EXPECT_EQ(tuple.size(), 1u);
  EXPECT_THAT(tuple.entry(0), ElementsAre("x", "y"));
  EXPECT_EQ(tuple.to_string(), "P(('x', 'y'))");

  EXPECT_EQ(PartitionSpec({{"x"}}).to_string(), "P('x')");
  EXPECT_EQ(PartitionSpec({{"x"}, {}, {"x", "y"}}).to_string(), "P('x', None, ('x', 'y'))");
}

TEST(PartitionSpecTest, EntriesPastTheEndAreNone) {
  const PartitionSpec p({{"x"}});
  EXPECT_THAT(p.entry(0), ElementsAre("x"));
  EXPECT_TRUE(p.entry(1).empty());
  EXPECT_TRUE(p.entry(100).empty());
}

TEST(PartitionSpecTest, AxesListsEveryName) {
  EXPECT_THAT(PartitionSpec({{"x"}, {}, {"y", "z"}}).axes(), ElementsAre("x", "y", "z"));
  EXPECT_THAT(PartitionSpec({{"x"}, {"x"}}).axes(), ElementsAre("x", "x"));  // kept; see header
  EXPECT_TRUE(PartitionSpec{}.axes().empty());
}

TEST(PartitionSpecTest, EqualityAndNormalized) {
  EXPECT_EQ(PartitionSpec({{"x"}}), PartitionSpec::parse("P('x')"));
  EXPECT_FALSE(PartitionSpec({{"x"}}) == PartitionSpec({{"x"}, {}}));
  EXPECT_EQ(PartitionSpec({{"x"}, {}, {}}).normalized(), PartitionSpec({{"x"}}));
  EXPECT_EQ(PartitionSpec({{}, {}}).normalized(), PartitionSpec{});
  EXPECT_EQ(PartitionSpec({{}, {"y"}}).normalized(), PartitionSpec({{}, {"y"}}));
}

TEST(PartitionSpecTest, ParsesEveryForm) {
  struct Case {
    const char* text;
    Entries want;
  };
  const Case cases[] = {
      {"P('x', None)", {{"x"}, {}}},
      {"('x','y'), None", {{"x", "y"}, {}}},
      {"x,y", {{"x"}, {"y"}}},
      {"", {}},
      {"   ", {}},
      {"P()", {}},
      {"PartitionSpec('data', 'model')", {{"data"}, {"model"}}},
      {"P(\"x\", None, ('x', \"y\"))", {{"x"}, {}, {"x", "y"}}},
      {"  P ( 'x' , ( 'y' , 'z' ) , )  ", {{"x"}, {"y", "z"}}},
      {"P('x',)", {{"x"}}},
      {"('x',)", {{"x"}}},
      {"('x')", {{"x"}}},
      {"()", {{}}},
      {"None, None", {{}, {}}},
      {"P(None)", {{}}},
      {"x_1, _y", {{"x_1"}, {"_y"}}},
      {"P, x", {{"P"}, {"x"}}},      // P not followed by '(' is an axis name
      {"Nonesuch", {{"Nonesuch"}}},  // only the exact word None is None
      {"'None'", {{"None"}}},        // a quoted None is an axis name
      {"'data parallel'", {{"data parallel"}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_EQ(PartitionSpec::parse(c.text).entries(), c.want);
  }
}

TEST(PartitionSpecTest, ToStringParsesBack) {
  const PartitionSpec specs[] = {
      PartitionSpec{},
      PartitionSpec({{"x"}}),
      PartitionSpec({{}, {"y"}}),
      PartitionSpec({{"x", "y"}, {}, {"z"}}),
      PartitionSpec({{"a b"}, {"None"}}),
  };
  for (const PartitionSpec& p : specs) {
    SCOPED_TRACE(p.to_string());
    EXPECT_EQ(PartitionSpec::parse(p.to_string()), p);
  }
}

TEST(PartitionSpecTest, ParseErrorsNameThePosition) {
  struct Case {
    const char* text;
    const char* want;  // substring of the message
  };
  const Case cases[] = {
      {"P('x'", "expected ',' or ')' at position 5, found end of text"},
      {"P('x') y", "expected end of text after the closing ')' at position 7, found 'y'"},
      {"x y", "expected ',' or end of text at position 2, found 'y'"},
      {"'x", "expected a closing ' at position 0"},
      {"P('')", "expected a non-empty axis name at position 2"},
      {"((x, y))", "tuples do not nest"},
      {"(x, None)", "None cannot appear inside a tuple"},
      {"x,,y", "expected an axis name, None or '(' at position 2, found ','"},
      {"3", "expected an axis name, None or '(' at position 0, found '3'"},
      {"(x y)", "expected ',' or ')' in a tuple of axis names at position 3, found 'y'"},
      {"P(", "at position 2, found end of text"},
      // Regression: a multi-byte character is quoted whole, and a
      // byte that is no printable character is named by its value.
      {"P(\u00e9)", "expected an axis name, None or '(' at position 2, found '\u00e9'"},
      {"P(\u4e2d)", "at position 2, found '\u4e2d'"},
      {"P(\xc3)", "at position 2, found byte 0xC3"},
      {"P(\x01)", "at position 2, found byte 0x01"},
      {"P(unreduced={'x'}, 'y')",
       "expected ')' (entries come before unreduced= and reduce_op=) at position 19, found \"'\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    try {
      PartitionSpec::parse(c.text);
      ADD_FAILURE() << "expected InvalidArgumentError";
    } catch (const InvalidArgumentError& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.want));
      EXPECT_THAT(e.what(), HasSubstr(std::string("\"") + c.text + "\""));
    }
  }
}

TEST(PartitionSpecTest, BadNamesAreRejected) {
  EXPECT_THROW(PartitionSpec({{""}}), InvalidArgumentError);
  EXPECT_THROW(PartitionSpec({{"x"}, {"y", ""}}), InvalidArgumentError);
  try {
    PartitionSpec({{"it's"}});
    ADD_FAILURE() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& e) {
    EXPECT_THAT(e.what(), HasSubstr("quote"));
    EXPECT_THAT(e.what(), HasSubstr("entry 0"));
  }
}

// Errors quote a huge spec abbreviated (parse errors: the part around the position), so the
// message stays a few hundred characters and keeps the offending axis and the tail. Regression:
// errors quoted the whole spec, and a 20 000-axis spec made a 150 KB error line.
TEST(PartitionSpecTest, ErrorsAbbreviateHugeSpecs) {
  std::string axes;
  for (int i = 0; i < 20000; ++i) axes += (i ? "," : "") + std::string("a") + std::to_string(i);
  const Mesh mesh({2}, {"x"});
  std::string msg =
      testing::expect_error(ErrorCode::kInvalidArgument,
                            [&] { NamedSharding(mesh, PartitionSpec::parse("P((" + axes + "))")); },
                            {"'a0'", "omitted", "'a19999'))"});  // the tail is kept
  EXPECT_LT(msg.size(), 1000u);
  msg = testing::expect_error(ErrorCode::kInvalidArgument,
                              [&] { PartitionSpec::parse("P((" + axes + ",$))"); },
                              {"a19999,$))", "'$'"});
  EXPECT_LT(msg.size(), 1000u);
  // A short spec is quoted whole, as before.
  testing::expect_error(ErrorCode::kInvalidArgument, [] { PartitionSpec::parse("P('x',$)"); },
                        {"\"P('x',$)\""});
  // abbreviate never cuts a UTF-8 sequence: 400 two-byte characters keep whole ones.
  std::string accents;
  for (int i = 0; i < 400; ++i) accents += "\xC3\xA9";
  const std::string a = abbreviate(accents);
  EXPECT_LE(a.size(), kMaxQuotedChars + 40);
  const size_t cut = a.find("...");
  ASSERT_NE(cut, std::string::npos);
  EXPECT_EQ(cut % 2, 0u);
  EXPECT_EQ((a.size() - a.rfind("...") - 3) % 2, 0u);
}

}  // namespace
}  // namespace vtpu
