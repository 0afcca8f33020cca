#include "tools/bench_serve_steps.h"

#include <httplib.h>

#include <cstdlib>
#include <sstream>

namespace petrel::tools {

std::optional<ServerStepTimes> ReadServerStepTimes(const std::string& url,
                                                   const std::string& api_key) {
  httplib::Client client(url);
  client.set_read_timeout(10, 0);
  httplib::Headers headers;
  if (!api_key.empty()) headers = {{"Authorization", "Bearer " + api_key}};
  auto res = client.Get("/metrics", headers);
  if (!res || res->status != 200) return std::nullopt;
  ServerStepTimes times;
  int found = 0;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.rfind(' ');
    if (line.empty() || line[0] == '#' || space == std::string::npos) continue;
    const std::string name = line.substr(0, space);
    const double value = std::strtod(line.c_str() + space + 1, nullptr);
    double* into = name == "petrel_steps_total"                             ? &times.steps
                   : name == "petrel_step_seconds_total{part=\"engine\"}"     ? &times.engine_s
                   : name == "petrel_step_seconds_total{part=\"consume\"}"    ? &times.consume_s
                   : name == "petrel_step_seconds_total{part=\"scheduling\"}" ? &times.scheduling_s
                                                                              : nullptr;
    if (into) {
      *into = value;
      ++found;
    }
  }
  if (found != 4) return std::nullopt;
  return times;
}

ServerStepTimes StepTimesBetween(const ServerStepTimes& before, const ServerStepTimes& after) {
  return ServerStepTimes{after.steps - before.steps, after.engine_s - before.engine_s,
                         after.consume_s - before.consume_s,
                         after.scheduling_s - before.scheduling_s};
}

}  // namespace petrel::tools
