// Bearer-token authentication for the scheduler's HTTP API. The tokens file lists SHA-256 hex
// hashes of admin, node and user tokens (never the tokens themselves); a request's token is hashed
// and compared with every entry in constant time.
//
// Tokens file (YAML; JSON is YAML too):
//   admin: [{name: ops, sha256: 9f86d0...}]
//   node:  [{name: node-1, sha256: ...}]
//   user:  [{name: alice, sha256: ...}]
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace fp8rt::sched {

enum class Role { kAdmin, kNode, kUser };
const char* RoleName(Role r);  // "admin", "node", "user"

// Who sent a request.
struct Principal {
  Role role = Role::kUser;
  std::string name;          // user name (users), node id (nodes) or operator name (admins)
  std::string token_sha256;  // hash of the token used; keys per-token rate limits

  bool operator==(const Principal&) const = default;
};

// Lower-case hex SHA-256 of `token`: what the tokens file holds for it.
std::string HashToken(const std::string& token);

class TokenAuth {
 public:
  struct Entry {
    Role role = Role::kUser;
    std::string name;
    std::string sha256;  // 64 lower-case hex characters
  };

  // Parses and validates a tokens file's text: only the keys admin, node and user; every entry a
  // map with name and sha256 (64 hex characters); no hash listed twice.
  static Result<TokenAuth> Parse(const std::string& text);
  static Result<TokenAuth> Load(const std::string& path);

  // `authorization` is the Authorization header's value, "Bearer <token>". Unauthenticated when
  // it is missing, malformed or names no known token.
  Result<Principal> Authenticate(const std::string& authorization) const;

  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace fp8rt::sched
