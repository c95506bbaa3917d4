// The strict YAML/JSON reader: yaml-cpp's event parser and nlohmann's SAX parser feed one tree
// builder that enforces the document rules; the field readers enforce types and ranges.
#include "common/strict_yaml.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_set>

namespace fp8rt::strict {
namespace {

using json = nlohmann::json;

// Longest user text quoted back in a message.
constexpr size_t kQuoteMax = 80;

std::string Clip(const std::string& s) {
  if (s.size() <= kQuoteMax) return s;
  return s.substr(0, kQuoteMax) + "...";
}

std::string AtLine(int line) { return line > 0 ? StrCat(" at line ", line) : std::string(); }

}  // namespace

// RFC 3629 UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int n = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (int k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

namespace {

bool IsDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool IsYamlFloat(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  const size_t int_start = i;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  const bool int_digits = i > int_start;
  bool frac_digits = false;
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t f = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    frac_digits = i > f;
  }
  if (!int_digits && !frac_digits) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (!IsDigits(s.substr(i))) return false;
    return true;
  }
  return i == s.size();
}

// Types an unquoted YAML scalar by the YAML 1.2 core schema.
Result<Value> TypePlain(const std::string& s, int line) {
  Value v;
  v.text = s;
  v.plain = true;
  v.line = line;
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") {
    v.kind = Kind::kNull;
    return v;
  }
  if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" || s == "FALSE") {
    v.kind = Kind::kBool;
    v.b = s[0] == 't' || s[0] == 'T';
    return v;
  }
  const std::string_view body = (s[0] == '+' || s[0] == '-') ? std::string_view(s).substr(1) : s;
  if (IsDigits(body)) {
    int64_t n = 0;
    const char* first = s.data() + (s[0] == '+' ? 1 : 0);
    const auto [ptr, ec] = std::from_chars(first, s.data() + s.size(), n);
    v.kind = Kind::kInt;
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      // Outside the 64-bit range: kept, so the field reader can name the field in its refusal.
      v.overflow = true;
      v.i = s[0] == '-' ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
      v.f = std::strtod(s.c_str(), nullptr);
      return v;
    }
    v.i = n;
    v.f = static_cast<double>(n);
    return v;
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    v.kind = Kind::kFloat;
    v.f = s[0] == '-' ? -HUGE_VAL : HUGE_VAL;
    return v;
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    v.kind = Kind::kFloat;
    v.f = std::nan("");
    return v;
  }
  if (IsYamlFloat(s)) {
    v.kind = Kind::kFloat;
    v.f = std::strtod(s.c_str(), nullptr);  // overflow gives +-HUGE_VAL: refused as not finite
    return v;
  }
  v.kind = Kind::kString;
  return v;
}

// Builds the tree from parser events and enforces the document rules. The first error sticks;
// later events are ignored.
class Builder {
 public:
  Builder(std::string what, const Limits& limits) : what_(std::move(what)), limits_(limits) {}

  bool failed() const { return !status_.ok(); }
  const Status& status() const { return status_; }
  Value& root() { return root_; }

  bool Fail(std::string message) {
    if (status_.ok()) status_ = Status::InvalidArgument(StrCat(what_, ": ", message));
    return false;
  }

  // A scalar: the pending key of a mapping if one is expected, else a value.
  bool Scalar(Value v) {
    if (failed()) return false;
    if (v.kind == Kind::kString && !IsUtf8(v.text)) {
      return Fail(StrCat("text", AtLine(v.line), " is not valid UTF-8"));
    }
    if (!stack_.empty() && stack_.back().want_key) {
      if (v.kind != Kind::kString) {
        return Fail(StrCat("key ", v.Describe(), AtLine(v.line), " is ", KindName(v.kind),
                           "; keys must be strings"));
      }
      return Key(std::move(v.text), v.line);
    }
    Value* slot = Slot();
    if (slot == nullptr) return false;
    *slot = std::move(v);
    return true;
  }

  bool Key(std::string key, int line) {
    if (failed()) return false;
    Frame& f = stack_.back();
    if (!IsUtf8(key)) return Fail(StrCat("a key", AtLine(line), " is not valid UTF-8"));
    if (!f.keys.insert(key).second) {
      return Fail(StrCat("duplicate key '", Clip(key), "'", AtLine(line),
                         " (a key may appear once per mapping)"));
    }
    f.key = std::move(key);
    f.want_key = false;
    return true;
  }

  bool Begin(Kind kind, int line) {
    if (failed()) return false;
    if (!stack_.empty() && stack_.back().want_key) {
      return Fail(StrCat("a key", AtLine(line), " is ", KindName(kind), "; keys must be strings"));
    }
    if (static_cast<int>(stack_.size()) >= limits_.max_depth) {
      return Fail(
          StrCat("nesting", AtLine(line), " is deeper than ", limits_.max_depth, " levels"));
    }
    Value* slot = Slot();
    if (slot == nullptr) return false;
    slot->kind = kind;
    slot->line = line;
    stack_.push_back({slot, kind == Kind::kMap, {}, {}});
    return true;
  }

  bool End() {
    if (failed()) return false;
    stack_.pop_back();
    return true;
  }

 private:
  struct Frame {
    Value* v;
    bool want_key;
    std::string key;
    std::unordered_set<std::string> keys;
  };

  // Where the next value goes: the root, a new list item or the pending key's value.
  Value* Slot() {
    if (++count_ > limits_.max_values) {
      Fail(StrCat("more than ", limits_.max_values, " values"));
      return nullptr;
    }
    if (stack_.empty()) {
      if (have_root_) {
        Fail("more than one document");
        return nullptr;
      }
      have_root_ = true;
      return &root_;
    }
    Frame& f = stack_.back();
    if (f.v->kind == Kind::kSeq) {
      f.v->items.emplace_back();
      return &f.v->items.back();
    }
    f.v->fields.emplace_back(std::move(f.key), Value());
    f.want_key = true;
    return &f.v->fields.back().second;
  }

  std::string what_;
  Limits limits_;
  Status status_;
  Value root_;
  bool have_root_ = false;
  size_t count_ = 0;
  std::vector<Frame> stack_;
};

class YamlHandler final : public YAML::EventHandler {
 public:
  explicit YamlHandler(Builder* b) : b_(b) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t anchor) override {
    CheckAnchor(m, anchor);
    Value v;
    v.plain = true;
    v.text = "null";
    v.line = m.line + 1;
    Check(b_->Scalar(std::move(v)));
  }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override {
    b_->Fail(StrCat("an alias (*name)", AtLine(m.line + 1),
                    " is not allowed: anchors and aliases are refused"));
    return;
  }
  void OnScalar(const YAML::Mark& m, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    CheckAnchor(m, anchor);
    CheckTag(m, tag);
    if (tag == "!") {  // quoted (or a block scalar): a string
      Value v;
      v.kind = Kind::kString;
      v.text = value;
      v.line = m.line + 1;
      Check(b_->Scalar(std::move(v)));
      return;
    }
    auto v = TypePlain(value, m.line + 1);
    if (!v.ok()) {
      b_->Fail(v.status().message());
      return;
    }
    Check(b_->Scalar(std::move(v).value()));
  }
  void OnSequenceStart(const YAML::Mark& m, const std::string& tag, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    CheckAnchor(m, anchor);
    CheckTag(m, tag);
    Check(b_->Begin(Kind::kSeq, m.line + 1));
  }
  void OnSequenceEnd() override { Check(b_->End()); }
  void OnMapStart(const YAML::Mark& m, const std::string& tag, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    CheckAnchor(m, anchor);
    CheckTag(m, tag);
    Check(b_->Begin(Kind::kMap, m.line + 1));
  }
  void OnMapEnd() override { Check(b_->End()); }
  void OnAnchor(const YAML::Mark& m, const std::string& name) override {
    b_->Fail(StrCat("the anchor &", Clip(name), AtLine(m.line + 1),
                    " is not allowed: anchors and aliases are refused"));
    return;
  }

 private:
  // The builder keeps the first refusal and ignores later events; the parser runs to the end so
  // that a syntax error, which explains more, takes precedence over a refusal it caused.
  void Check(bool) {}
  void CheckAnchor(const YAML::Mark& m, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) {
      b_->Fail(StrCat("an anchor (&name)", AtLine(m.line + 1),
                      " is not allowed: anchors and aliases are refused"));
      return;
    }
  }
  void CheckTag(const YAML::Mark& m, const std::string& tag) {
    if (tag != "?" && tag != "!" && !tag.empty()) {
      b_->Fail(StrCat("the tag ", Clip(tag), AtLine(m.line + 1), " is not allowed"));
      return;
    }
  }
  Builder* b_;
};

class JsonSax {
 public:
  explicit JsonSax(Builder* b) : b_(b) {}
  bool syntax_error = false;
  std::string syntax_message;

  bool null() {
    Value v;
    v.text = "null";
    return b_->Scalar(std::move(v));
  }
  bool boolean(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    v.text = x ? "true" : "false";
    return b_->Scalar(std::move(v));
  }
  bool number_integer(json::number_integer_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    v.f = static_cast<double>(x);
    v.text = std::to_string(x);
    return b_->Scalar(std::move(v));
  }
  bool number_unsigned(json::number_unsigned_t x) {
    if (x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      Value v;  // kept, so the field reader can name the field in its refusal
      v.kind = Kind::kInt;
      v.overflow = true;
      v.i = std::numeric_limits<int64_t>::max();
      v.f = static_cast<double>(x);
      v.text = std::to_string(x);
      return b_->Scalar(std::move(v));
    }
    return number_integer(static_cast<int64_t>(x));
  }
  bool number_float(json::number_float_t x, const std::string& s) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    v.text = s;
    // An integer literal too large for 64 bits (JSON's parser gives it as a float): an integer
    // out of range, refused by its field naming it, as in YAML.
    const std::string_view digits = !s.empty() && s[0] == '-' ? std::string_view(s).substr(1) : s;
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos) {
      v.kind = Kind::kInt;
      v.overflow = true;
      v.i = s[0] == '-' ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
    }
    return b_->Scalar(std::move(v));
  }
  bool string(std::string& s) {
    Value v;
    v.kind = Kind::kString;
    v.text = std::move(s);
    return b_->Scalar(std::move(v));
  }
  bool binary(json::binary_t&) { return b_->Fail("binary values are not JSON"); }
  bool start_object(std::size_t) { return b_->Begin(Kind::kMap, 0); }
  bool key(std::string& k) { return b_->Key(std::move(k), 0); }
  bool end_object() { return b_->End(); }
  bool start_array(std::size_t) { return b_->Begin(Kind::kSeq, 0); }
  bool end_array() { return b_->End(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    syntax_error = true;
    syntax_message = e.what();
    return false;
  }

 private:
  Builder* b_;
};

nlohmann::ordered_json ToNlohmann(const Value& v) {
  using ordered = nlohmann::ordered_json;
  switch (v.kind) {
    case Kind::kNull:
      return nullptr;
    case Kind::kBool:
      return v.b;
    case Kind::kInt:
      if (v.overflow) return v.f;
      return v.i;
    case Kind::kFloat:
      return v.f;
    case Kind::kString:
      return v.text;
    case Kind::kSeq: {
      ordered a = ordered::array();
      for (const Value& e : v.items) a.push_back(ToNlohmann(e));
      return a;
    }
    case Kind::kMap: {
      ordered m = ordered::object();
      for (const auto& [k, e] : v.fields) m[k] = ToNlohmann(e);
      return m;
    }
  }
  return nullptr;
}

}  // namespace

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kInt:
      return "an integer";
    case Kind::kFloat:
      return "a number";
    case Kind::kString:
      return "a string";
    case Kind::kSeq:
      return "a list";
    case Kind::kMap:
      return "a mapping";
  }
  return "?";
}

const Value* Value::Find(std::string_view key) const {
  for (const auto& [k, v] : fields) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Value::Describe() const {
  switch (kind) {
    case Kind::kString:
      return plain ? Clip(text) : StrCat("\"", Clip(text), "\"");
    case Kind::kSeq:
      return "a list";
    case Kind::kMap:
      return "a mapping";
    default:
      return Clip(text);
  }
}

Result<Value> Parse(std::string_view text, std::string_view what, const Limits& limits) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && (text[first] == '{' || text[first] == '[')) {
    Builder b{std::string(what), limits};
    JsonSax sax(&b);
    const bool ok = json::sax_parse(text.begin(), text.end(), &sax);
    if (ok) return std::move(b.root());
    if (!sax.syntax_error) return b.status();  // valid JSON, refused by a document rule
    // Not JSON: flow-style YAML ({a: 1}) or a real error, which the YAML parser reports.
  }
  Builder b{std::string(what), limits};
  YamlHandler handler(&b);
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    if (parser.HandleNextDocument(handler) && parser.HandleNextDocument(handler)) {
      b.Fail("more than one document (---); give one");
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(StrCat(what, " is not valid YAML or JSON: ", e.what()));
  }
  if (b.failed()) return b.status();
  return std::move(b.root());
}

std::string ToJson(const Value& v) {
  return ToNlohmann(v).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// ---- field readers ----

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : StrCat(path, ".", key);
}

Status WrongKind(const Value& v, const std::string& path, const char* expected) {
  return Status::InvalidArgument(
      StrCat(path, " = ", v.Describe(), " is ", KindName(v.kind), "; expected ", expected));
}

Reader String(std::string* out, size_t max_len) {
  return [out, max_len](const Value& v, const std::string& path) -> Status {
    const bool ok =
        v.kind == Kind::kString ||
        (v.plain && (v.kind == Kind::kInt || v.kind == Kind::kFloat || v.kind == Kind::kBool));
    if (!ok) return WrongKind(v, path, "a string");
    if (v.text.size() > max_len) {
      return Status::InvalidArgument(StrCat(path, " = \"", Clip(v.text), "\" is ", v.text.size(),
                                            " bytes long; at most ", max_len, " are allowed"));
    }
    *out = v.text;
    return Status::Ok();
  };
}

Reader Bool(bool* out) {
  return [out](const Value& v, const std::string& path) -> Status {
    if (v.kind != Kind::kBool) return WrongKind(v, path, "a boolean (true or false)");
    *out = v.b;
    return Status::Ok();
  };
}

namespace {
template <typename T>
Reader IntegerImpl(T* out, int64_t lo, int64_t hi) {
  return [out, lo, hi](const Value& v, const std::string& path) -> Status {
    if (v.kind != Kind::kInt) return WrongKind(v, path, "an integer");
    if (v.overflow) {
      return Status::InvalidArgument(
          StrCat(path, " = ", Clip(v.text), " is out of range [", lo, ", ", hi, "]"));
    }
    if (v.i < lo || v.i > hi) {
      return Status::InvalidArgument(
          StrCat(path, " = ", v.i, " is out of range [", lo, ", ", hi, "]"));
    }
    *out = static_cast<T>(v.i);
    return Status::Ok();
  };
}
}  // namespace

Reader Integer(int64_t* out, int64_t lo, int64_t hi) { return IntegerImpl(out, lo, hi); }
Reader Integer(int* out, int64_t lo, int64_t hi) {
  return IntegerImpl(out, std::max<int64_t>(lo, std::numeric_limits<int>::min()),
                     std::min<int64_t>(hi, std::numeric_limits<int>::max()));
}

Reader Number(double* out, double lo, double hi) {
  return [out, lo, hi](const Value& v, const std::string& path) -> Status {
    if (v.kind != Kind::kInt && v.kind != Kind::kFloat) return WrongKind(v, path, "a number");
    if (!std::isfinite(v.f)) {
      return Status::InvalidArgument(StrCat(path, " = ", v.Describe(), " is not a finite number"));
    }
    if (v.f < lo || v.f > hi) {
      return Status::InvalidArgument(
          StrCat(path, " = ", v.Describe(), " is out of range [", lo, ", ", hi, "]"));
    }
    *out = v.f;
    return Status::Ok();
  };
}

Reader Number(float* out, double lo, double hi) {
  return [out, lo, hi](const Value& v, const std::string& path) -> Status {
    double d = 0;
    FP8RT_RETURN_IF_ERROR(Number(&d, lo, hi)(v, path));
    *out = static_cast<float>(d);
    return Status::Ok();
  };
}

Reader OneOf(std::string* out, std::vector<std::string> allowed) {
  return [out, allowed = std::move(allowed)](const Value& v, const std::string& path) -> Status {
    std::string s;
    FP8RT_RETURN_IF_ERROR(String(&s, 256)(v, path));
    std::string list;
    for (const std::string& a : allowed) {
      if (s == a) {
        *out = s;
        return Status::Ok();
      }
      list += (list.empty() ? "" : ", ") + a;
    }
    return Status::InvalidArgument(StrCat(path, " = '", Clip(s), "' is not one of: ", list));
  };
}

Status ReadFields(const Value& map, const std::string& path,
                  const std::vector<std::pair<std::string, Reader>>& readers) {
  if (map.kind != Kind::kMap) {
    return Status::InvalidArgument(StrCat(path.empty() ? "the document" : path, " is ",
                                          KindName(map.kind), "; expected a mapping of fields"));
  }
  for (const auto& [key, value] : map.fields) {
    auto it = std::find_if(readers.begin(), readers.end(),
                           [&key = key](const auto& r) { return r.first == key; });
    if (it == readers.end()) {
      std::set<std::string> names;
      for (const auto& r : readers) names.insert(r.first);
      std::string allowed;
      for (const auto& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
      return Status::InvalidArgument(StrCat("unknown field '", Clip(Join(path, key)), "'",
                                            AtLine(value.line), "; allowed",
                                            path.empty() ? "" : " here", ": ", allowed));
    }
    // A value's refusal names its line (YAML), once: nested mappings add none of their own.
    Status read = it->second(value, Join(path, key));
    if (!read.ok() && value.line > 0 && read.message().find(" at line ") == std::string::npos) {
      read = Status(read.code(), StrCat(read.message(), AtLine(value.line)));
    }
    FP8RT_RETURN_IF_ERROR(read);
  }
  return Status::Ok();
}

}  // namespace fp8rt::strict
