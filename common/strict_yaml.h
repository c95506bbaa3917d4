// The one strict reader for everything a person or a program hands us as YAML or JSON: trainer
// configs, job specs, tokens files, node registrations and heartbeats. It parses into a typed tree
// and refuses, naming the line, what a careless or hostile document can do to a lenient reader:
// duplicate keys (the last would win), keys that are not strings, anchors and aliases (no
// "billion laughs" expansion anywhere), explicit tags, several documents, deep nesting and
// oversized documents. Field readers then refuse quoted strings where numbers or booleans belong,
// NaN and infinities, and values outside a field's documented range, naming the field.
//
// Scalars are typed by the YAML 1.2 core schema: unquoted `null`/`~`/empty is null, `true`/`false`
// a boolean, `12` an integer, `1.5`/`3e-4`/`.inf`/`.nan` a number, anything quoted a string. JSON
// is read by a JSON parser (so surrogate-pair escapes such as "\ud83d\ude80" work); a document that
// is not valid JSON is read as YAML (which covers flow-style `{a: 1}`).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace fp8rt::strict {

enum class Kind { kNull, kBool, kInt, kFloat, kString, kSeq, kMap };
// "null", "a boolean", "an integer", "a number", "a string", "a list", "a mapping".
const char* KindName(Kind k);

struct Value {
  Kind kind = Kind::kNull;
  bool b = false;            // kBool
  int64_t i = 0;             // kInt
  // kInt outside the 64-bit range (i is clamped, f approximate, text as written): refused by
  // Integer() naming the field.
  bool overflow = false;
  double f = 0;              // kFloat (and kInt, converted)
  std::string text;          // kString: the string; other scalars: as written (for messages)
  bool plain = false;        // an unquoted YAML scalar (so a string field may take `name: 2024`)
  std::vector<Value> items;  // kSeq
  std::vector<std::pair<std::string, Value>> fields;  // kMap: document order, keys unique
  int line = 0;                                       // 1-based; 0 when unknown (JSON)

  bool is_scalar() const { return kind != Kind::kSeq && kind != Kind::kMap; }
  // The field's value, or nullptr.
  const Value* Find(std::string_view key) const;
  // For messages: `"2"` for a string, `2` for a number, `a list` for a list.
  std::string Describe() const;
};

struct Limits {
  int max_depth = 64;           // nesting of lists and mappings. Default: 64
  size_t max_values = 200'000;  // scalars, lists and mappings together. Default: 200000
};

// Parses one YAML or JSON document. `what` names it in errors ("job spec", "config file x.yaml").
// An empty document is a null Value.
Result<Value> Parse(std::string_view text, std::string_view what, const Limits& limits = {});

// The value as compact JSON (strings escaped, numbers round-trip, NaN impossible: it is never
// produced by a reader that refuses it, and written as null if present).
std::string ToJson(const Value& v);

// RFC 3629 UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF).
bool IsUtf8(std::string_view s);

// ---- Reading fields ----
// A field reader stores a field's value or says why it cannot, naming `path` ("nodes",
// "model.n_layer", "gpus[2].count").
using Reader = std::function<Status(const Value& v, const std::string& path)>;

// A string: quoted, or an unquoted YAML scalar as written (not null, not a list or mapping).
Reader String(std::string* out, size_t max_len = 4096);
// true or false (not "true", not yes/no).
Reader Bool(bool* out);
// An integer in [lo, hi] (not "2", not 2.0).
Reader Integer(int64_t* out, int64_t lo = std::numeric_limits<int64_t>::min(),
               int64_t hi = std::numeric_limits<int64_t>::max());
Reader Integer(int* out, int64_t lo = std::numeric_limits<int>::min(),
               int64_t hi = std::numeric_limits<int>::max());
// A finite number (integers too) in [lo, hi].
Reader Number(double* out, double lo = -std::numeric_limits<double>::max(),
              double hi = std::numeric_limits<double>::max());
Reader Number(float* out, double lo = -std::numeric_limits<float>::max(),
              double hi = std::numeric_limits<float>::max());
// A string that is one of `allowed`.
Reader OneOf(std::string* out, std::vector<std::string> allowed);

// Reads a mapping's fields with the reader each key is given; a key with no reader is refused,
// listing the allowed ones. `path` prefixes field names ("" at the top, "model" for model.x).
// `what` names the mapping when it is not one ("job spec", "model").
Status ReadFields(const Value& map, const std::string& path,
                  const std::vector<std::pair<std::string, Reader>>& readers);

// Status helpers for custom readers, worded like the built-in ones.
Status WrongKind(const Value& v, const std::string& path, const char* expected);
// path + "." + key, or key at the top.
std::string Join(const std::string& path, const std::string& key);

}  // namespace fp8rt::strict
