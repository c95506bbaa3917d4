// fp8ctl: the command line for users of an fp8rt cluster, over the scheduler's HTTP API
// (docs/API.md): submit, list, status, cancel, events, nodes. Every verb has the same exit codes;
// read verbs print tables, or JSON with --json.
#pragma once

#include <ostream>

namespace fp8rt::fp8ctl {

inline constexpr int kOk = 0;           // done (submit --wait: the job COMPLETED)
inline constexpr int kJobFailed = 1;    // submit --wait: the job ended FAILED or CANCELLED
inline constexpr int kBadInput = 2;     // a bad flag, file or spec (the server's 400 names the field)
inline constexpr int kNotFound = 3;     // no such job
inline constexpr int kAuth = 4;         // no token, a wrong token, or another user's job
inline constexpr int kUnreachable = 5;  // the server cannot be reached or did not answer
inline constexpr int kServerError = 6;  // the server failed (5xx) or answered nonsense

// The server and token come from --server / --token, else FP8CTL_SERVER / FP8CTL_TOKEN, else the
// config file $XDG_CONFIG_HOME/fp8ctl/config (default ~/.config/fp8ctl/config; YAML `server:`
// and `token:`; refused unless its mode is 0600), else http://127.0.0.1:8080 and no token.
int Main(int argc, char** argv, std::ostream& out, std::ostream& err);

}  // namespace fp8rt::fp8ctl
