// Where a petrel server's step time went during a bench-serve run: the scheduler's
// `petrel_step_seconds_total` counters from GET /metrics, read before and after the run.
#pragma once

#include <optional>
#include <string>

namespace petrel::tools {

struct ServerStepTimes {
  double steps = 0.0;
  double engine_s = 0.0;      // forward passes
  double consume_s = 0.0;     // sampling and detokenizing their outputs
  double scheduling_s = 0.0;  // admission, building steps, reporting to the streams
};

// The server's counters now, or nullopt where it has no such counters (not a petrel server,
// or /metrics unreachable).
std::optional<ServerStepTimes> ReadServerStepTimes(const std::string& url,
                                                   const std::string& api_key);

// What the counters grew by from `before` to `after`.
ServerStepTimes StepTimesBetween(const ServerStepTimes& before, const ServerStepTimes& after);

}  // namespace petrel::tools
