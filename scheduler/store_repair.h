// What happens to a stored record that does not read back (damaged on disk, or written by an older,
// more lenient version): it is set aside, its bytes kept under "corrupt/<key>", so that one bad
// record never takes the API or a restart down with it. A job record is replaced by a FAILED job
// holding what could be salvaged (id, owner, name, config path), with an event that says why; or,
// when the scheduler still holds the job in memory, rewritten from that copy. A node record is
// dropped: its daemon registers again.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/store.h"

namespace fp8rt::sched {

// The FAILED job (and its event) that takes the place of the unreadable job record `rec`.
JobWrite FailedInPlaceOf(const UnreadableRecord& rec, int64_t now);

// Sets aside every unreadable record of `store`; jobs found in `in_memory` are rewritten from it.
// Returns one line per record for the log ("set aside job/0000000000000002 (...): job 2 marked
// FAILED").
Result<std::vector<std::string>> SetAsideUnreadable(JobStore* store, int64_t now,
                                                    const std::map<int64_t, Job>* in_memory);

}  // namespace fp8rt::sched
