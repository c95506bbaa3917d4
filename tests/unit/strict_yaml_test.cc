// The strict YAML/JSON reader (common/strict_yaml.h): scalar typing, the document rules
// (duplicate and non-string keys, anchors and aliases, tags, several documents, depth, size,
// UTF-8), JSON escapes, and the field readers' types and ranges.
#include "common/strict_yaml.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

namespace fp8rt::strict {
namespace {

Value MustParse(const std::string& text) {
  auto v = Parse(text, "doc");
  EXPECT_TRUE(v.ok()) << text << ": " << v.status().ToString();
  return v.ok() ? std::move(v).value() : Value();
}

std::string ErrorOf(const std::string& text, const Limits& limits = {}) {
  auto v = Parse(text, "doc", limits);
  EXPECT_FALSE(v.ok()) << text << " should be refused";
  return v.ok() ? std::string() : v.status().message();
}

bool Has(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(StrictYaml, TypesPlainScalarsByTheCoreSchemaAndQuotedOnesAsStrings) {
  const Value v = MustParse(
      "a: 12\nb: -3\nc: 1.5\nd: 3e-4\ne: .inf\nf: .nan\ng: true\nh: False\ni: ~\nj:\n"
      "k: hello\nl: \"12\"\nm: 'true'\nn: yes\no: 1.2.3\np: +7\n");
  ASSERT_EQ(v.kind, Kind::kMap);
  auto kind = [&](const char* key) { return v.Find(key)->kind; };
  EXPECT_EQ(kind("a"), Kind::kInt);
  EXPECT_EQ(v.Find("a")->i, 12);
  EXPECT_EQ(v.Find("b")->i, -3);
  EXPECT_EQ(v.Find("p")->i, 7);
  EXPECT_EQ(kind("c"), Kind::kFloat);
  EXPECT_DOUBLE_EQ(v.Find("d")->f, 3e-4);
  EXPECT_TRUE(std::isinf(v.Find("e")->f));
  EXPECT_TRUE(std::isnan(v.Find("f")->f));
  EXPECT_EQ(kind("g"), Kind::kBool);
  EXPECT_TRUE(v.Find("g")->b);
  EXPECT_FALSE(v.Find("h")->b);
  EXPECT_EQ(kind("i"), Kind::kNull);
  EXPECT_EQ(kind("j"), Kind::kNull);
  EXPECT_EQ(kind("k"), Kind::kString);
  EXPECT_EQ(kind("l"), Kind::kString);
  EXPECT_EQ(v.Find("l")->text, "12");
  EXPECT_EQ(kind("m"), Kind::kString);
  EXPECT_EQ(kind("n"), Kind::kString);  // YAML 1.1's yes/no are strings in 1.2
  EXPECT_EQ(kind("o"), Kind::kString);
  EXPECT_EQ(v.Find("a")->line, 1);
  EXPECT_EQ(v.Find("p")->line, 16);
}

TEST(StrictYaml, JsonKeepsItsTypesAndDecodesSurrogatePairs) {
  const Value v = MustParse(R"({"s": "\ud83d\ude80", "n": 2, "q": "2", "f": 0.5, "b": false,
                               "z": null, "l": [1, "x"]})");
  EXPECT_EQ(v.Find("s")->text, "\xF0\x9F\x9A\x80");  // U+1F680
  EXPECT_EQ(v.Find("n")->kind, Kind::kInt);
  EXPECT_EQ(v.Find("q")->kind, Kind::kString);
  EXPECT_EQ(v.Find("f")->kind, Kind::kFloat);
  EXPECT_EQ(v.Find("b")->kind, Kind::kBool);
  EXPECT_EQ(v.Find("z")->kind, Kind::kNull);
  ASSERT_EQ(v.Find("l")->items.size(), 2u);
  EXPECT_EQ(v.Find("l")->items[1].text, "x");
  // Flow-style YAML that is not JSON is still read.
  const Value y = MustParse("{name: x, n: .nan}");
  EXPECT_EQ(y.Find("name")->text, "x");
  EXPECT_TRUE(std::isnan(y.Find("n")->f));
}

TEST(StrictYaml, RefusesDuplicateKeysNamingTheKey) {
  EXPECT_TRUE(Has(ErrorOf("a: 1\nb: 2\na: 3\n"), "duplicate key 'a' at line 3"));
  EXPECT_TRUE(Has(ErrorOf(R"({"name":"a","name":"b"})"), "duplicate key 'name'"));
  EXPECT_TRUE(Has(ErrorOf("x: {p: 0, p: 1000}"), "duplicate key 'p'"));
  // The same key in two different mappings is fine.
  MustParse("a: {k: 1}\nb: {k: 2}\n");
}

TEST(StrictYaml, RefusesKeysThatAreNotStrings) {
  EXPECT_TRUE(Has(ErrorOf(R"({"name":"x","config_path":"c",[a]: 1})"), "keys must be strings"));
  EXPECT_TRUE(Has(ErrorOf("? {a: 1}\n: 2\n"), "keys must be strings"));
  EXPECT_TRUE(Has(ErrorOf("1: x\n"), "keys must be strings"));
  EXPECT_TRUE(Has(ErrorOf("null: x\n"), "keys must be strings"));
}

TEST(StrictYaml, RefusesAnchorsAliasesTagsAndSeveralDocuments) {
  EXPECT_TRUE(Has(ErrorOf("a: &x 1\nb: *x\n"), "anchor"));
  EXPECT_TRUE(Has(ErrorOf("a: !!str 1\n"), "tag"));
  EXPECT_TRUE(Has(ErrorOf("a: 1\n---\nb: 2\n"), "more than one document"));
  // A billion-laughs document is refused at its first anchor, at once.
  std::string laughs = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n";
  for (char c = 'b'; c <= 'j'; ++c) {
    const char p = static_cast<char>(c - 1);
    laughs += StrCat(c, ": &", c, " [*", p, ",*", p, ",*", p, ",*", p, ",*", p, ",*", p, ",*", p,
                     ",*", p, "]\n");
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Has(ErrorOf(laughs), "anchors and aliases are refused"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(StrictYaml, RefusesDeepAndLargeDocumentsAndBadUtf8) {
  std::string deep(100, '[');
  deep += std::string(100, ']');
  EXPECT_TRUE(Has(ErrorOf(deep), "deeper than 64"));
  Limits small;
  small.max_values = 10;
  EXPECT_TRUE(Has(ErrorOf("[1,2,3,4,5,6,7,8,9,10,11]", small), "more than 10 values"));
  EXPECT_TRUE(Has(ErrorOf("a: \"\xC0\xAF\"\n"), "UTF-8"));
  // An integer too large for 64 bits parses (its field refuses it, naming itself), JSON or YAML.
  EXPECT_TRUE(MustParse(R"({"a": 99999999999999999999})").Find("a")->overflow);
  EXPECT_TRUE(MustParse("a: 99999999999999999999\n").Find("a")->overflow);
  EXPECT_TRUE(Has(ErrorOf("a: [1, 2\n"), "not valid YAML or JSON"));
  EXPECT_EQ(MustParse("").kind, Kind::kNull);
}

TEST(StrictYaml, AnIntegerOutsideSixtyFourBitsIsRefusedByItsFieldWithItsLine) {
  // Parsed (not refused by the parser, which cannot know the field) and refused by the reader,
  // naming the field, the value as written, its range and its line.
  const Value v = MustParse("name: x\nnodes: 9223372036854775808\n");
  int nodes = 0;
  std::string name;
  const Status s =
      ReadFields(v, "", {{"name", String(&name)}, {"nodes", Integer(&nodes, 1, 4096)}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "nodes = 9223372036854775808 is out of range [1, 4096] at line 2");
  int64_t big = 0;
  const Value neg = MustParse(R"({"n": -99999999999999999999})");
  EXPECT_TRUE(Has(ReadFields(neg, "", {{"n", Integer(&big)}}).message(),
                  "n = -99999999999999999999 is out of range"));
  const Value json = MustParse(R"({"nodes": 9223372036854775808})");
  EXPECT_TRUE(Has(ReadFields(json, "", {{"nodes", Integer(&nodes, 1, 4096)}}).message(),
                  "nodes = 9223372036854775808 is out of range [1, 4096]"));
  EXPECT_EQ(nodes, 0) << "nothing stored";
  double d = 0;
  EXPECT_TRUE(ReadFields(v, "", {{"name", String(&name)}, {"nodes", Number(&d)}}).ok())
      << "a number field takes it";
}

TEST(StrictYaml, FieldReadersRefuseTheWrongTypeNamingTheField) {
  const Value v =
      MustParse(R"({"nodes": "2", "preemptible": "false", "ratio": ".nan", "name": 7, "n": 2.0})");
  int n = 0;
  bool b = false;
  double d = 0;
  std::string s;
  EXPECT_EQ(Integer(&n)(*v.Find("nodes"), "nodes").message(),
            "nodes = \"2\" is a string; expected an integer");
  EXPECT_EQ(Bool(&b)(*v.Find("preemptible"), "preemptible").message(),
            "preemptible = \"false\" is a string; expected a boolean (true or false)");
  EXPECT_TRUE(Has(Number(&d)(*v.Find("ratio"), "ratio").message(), "is a string"));
  EXPECT_TRUE(Has(String(&s)(*v.Find("name"), "name").message(), "expected a string"));
  EXPECT_TRUE(Has(Integer(&n)(*v.Find("n"), "n").message(), "is a number; expected an integer"));
  // 1e999 is not JSON (its parser refuses the overflow), so it is read as YAML: a number that
  // is not finite.
  EXPECT_TRUE(Has(Number(&d)(*MustParse(R"({"m": 1e999})").Find("m"), "m").message(),
                  "m = 1e999 is not a finite number"));

  const Value y = MustParse("a: .nan\nb: -.inf\nc: 5\nd: 2024\ne: 0.5\n");
  EXPECT_EQ(Number(&d)(*y.Find("a"), "a").message(), "a = .nan is not a finite number");
  EXPECT_EQ(Number(&d)(*y.Find("b"), "b").message(), "b = -.inf is not a finite number");
  EXPECT_EQ(Integer(&n, 0, 4)(*y.Find("c"), "c").message(), "c = 5 is out of range [0, 4]");
  EXPECT_TRUE(Number(&d, 0, 1)(*y.Find("e"), "e").ok());
  EXPECT_EQ(d, 0.5);
  // An unquoted YAML scalar is a fine string as written.
  EXPECT_TRUE(String(&s)(*y.Find("d"), "d").ok());
  EXPECT_EQ(s, "2024");
  EXPECT_TRUE(Number(&d)(*y.Find("c"), "c").ok());  // integers are numbers
  EXPECT_EQ(d, 5);
}

TEST(StrictYaml, ReadFieldsRefusesUnknownFieldsListingTheAllowedOnes) {
  const Value v = MustParse("model: {n_layer: 2, bogus: 1}\n");
  int n = 0;
  const Status s =
      ReadFields(*v.Find("model"), "model", {{"n_layer", Integer(&n)}, {"n_head", Integer(&n)}});
  EXPECT_EQ(s.message(), "unknown field 'model.bogus' at line 1; allowed here: n_head, n_layer");
  EXPECT_TRUE(Has(ReadFields(MustParse("[1]"), "", {}).message(), "expected a mapping"));
}

TEST(StrictYaml, ToJsonKeepsOrderAndTypesAndParsesBack) {
  const Value v = MustParse("b: 1\na: [x, 2.5, true, null]\nc: {d: \"7\"}\n");
  const std::string j = ToJson(v);
  EXPECT_EQ(j, R"({"b":1,"a":["x",2.5,true,null],"c":{"d":"7"}})");
  EXPECT_EQ(ToJson(MustParse(j)), j);
}

}  // namespace
}  // namespace fp8rt::strict
