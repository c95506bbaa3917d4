// Tokens file parsing, SHA-256 (OpenSSL EVP) token hashing and constant-time lookup.
#include "scheduler/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <array>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include "common/strict_yaml.h"

namespace fp8rt::sched {
namespace {

bool IsLowerHex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

Status ParseRole(const strict::Value& list, Role role, std::vector<TokenAuth::Entry>* out) {
  const std::string key = RoleName(role);
  if (list.kind != strict::Kind::kSeq) {
    return Status::InvalidArgument(
        StrCat("tokens: ", key, ": expected a list of {name: ..., sha256: ...} entries"));
  }
  for (size_t i = 0; i < list.items.size(); ++i) {
    const std::string where = StrCat(key, "[", i, "]");
    TokenAuth::Entry entry;
    entry.role = role;
    const Status read = strict::ReadFields(list.items[i], where,
                                           {{"name", strict::String(&entry.name, 128)},
                                            {"sha256", strict::String(&entry.sha256, 64)}});
    if (!read.ok()) return Status::InvalidArgument(StrCat("tokens: ", read.message()));
    if (entry.name.empty()) {
      return Status::InvalidArgument(StrCat("tokens: ", where, ": name is required"));
    }
    if (!IsLowerHex64(entry.sha256)) {
      return Status::InvalidArgument(StrCat("tokens: ", where, ".sha256 = '", entry.sha256,
                                            "' is not 64 lower-case hex characters (the "
                                            "SHA-256 of the token; see HashToken)"));
    }
    out->push_back(std::move(entry));
  }
  return Status::Ok();
}

}  // namespace

const char* RoleName(Role r) {
  switch (r) {
    case Role::kAdmin:
      return "admin";
    case Role::kNode:
      return "node";
    case Role::kUser:
      return "user";
  }
  return "?";
}

std::string HashToken(const std::string& token) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  // EVP_Digest only fails on allocation failure; the hash then stays all zeros, which no valid
  // tokens file entry for a real token matches by chance.
  if (EVP_Digest(token.data(), token.size(), md.data(), &len, EVP_sha256(), nullptr) != 1) {
    len = 32;
  }
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    hex.push_back(kHex[md[i] >> 4]);
    hex.push_back(kHex[md[i] & 0xf]);
  }
  return hex;
}

Result<TokenAuth> TokenAuth::Parse(const std::string& text) {
  auto parsed = strict::Parse(text, "tokens");
  if (!parsed.ok()) return parsed.status();
  const strict::Value& root = *parsed;
  TokenAuth auth;
  if (root.kind == strict::Kind::kNull) return auth;
  if (root.kind != strict::Kind::kMap) {
    return Status::InvalidArgument("tokens: expected a map with keys admin, node, user");
  }
  for (const auto& [key, list] : root.fields) {
    Role role;
    if (key == "admin") {
      role = Role::kAdmin;
    } else if (key == "node") {
      role = Role::kNode;
    } else if (key == "user") {
      role = Role::kUser;
    } else {
      return Status::InvalidArgument(
          StrCat("tokens: unknown key '", key, "'; allowed: admin, node, user"));
    }
    FP8RT_RETURN_IF_ERROR(ParseRole(list, role, &auth.entries_));
  }
  std::set<std::string> seen;
  for (const Entry& e : auth.entries_) {
    if (!seen.insert(e.sha256).second) {
      return Status::InvalidArgument(
          StrCat("tokens: sha256 ", e.sha256, " is listed twice; every token must be unique"));
    }
  }
  return auth;
}

Result<TokenAuth> TokenAuth::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::IOError(StrCat("tokens file ", path, ": cannot be opened"));
  std::stringstream ss;
  ss << in.rdbuf();
  auto auth = Parse(ss.str());
  if (!auth.ok()) {
    return Status(auth.status().code(), StrCat(path, ": ", auth.status().message()));
  }
  return auth;
}

Result<Principal> TokenAuth::Authenticate(const std::string& authorization) const {
  static constexpr char kPrefix[] = "Bearer ";
  constexpr size_t kPrefixLen = sizeof(kPrefix) - 1;
  if (authorization.empty()) {
    return Status(StatusCode::kUnauthenticated,
                  "missing Authorization header; expected 'Authorization: Bearer <token>'");
  }
  if (authorization.size() <= kPrefixLen || authorization.compare(0, kPrefixLen, kPrefix) != 0) {
    return Status(StatusCode::kUnauthenticated,
                  "malformed Authorization header; expected 'Bearer <token>'");
  }
  const std::string hash = HashToken(authorization.substr(kPrefixLen));
  // Every entry is compared, each in constant time, so timing says nothing about which matched.
  const Entry* match = nullptr;
  for (const Entry& e : entries_) {
    if (CRYPTO_memcmp(e.sha256.data(), hash.data(), hash.size()) == 0) match = &e;
  }
  if (match == nullptr) return Status(StatusCode::kUnauthenticated, "unknown token");
  return Principal{match->role, match->name, hash};
}

}  // namespace fp8rt::sched
