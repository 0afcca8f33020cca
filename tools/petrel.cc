// The `petrel` command: one subcommand per task. Results go to stdout, logs to stderr; exit
// status 0 on success, 1 with a one-line "error: …" otherwise.
#include <cstdio>
#include <map>

#include "core/base/log.h"
#include "tools/common.h"

int main(int argc, char** argv) {
  using namespace petrel::tools;
  CLI::App app{"petrel: run large language models on the CPU"};
  app.require_subcommand(1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "log more to stderr");
  std::map<CLI::App*, Runner> runners;
  for (auto add : {&AddRunCommand, &AddChatCommand, &AddLogitsCommand, &AddTokenizeCommand, &AddInfoCommand,
                   &AddBenchCommand, &AddSynthCommand, &AddTemplateCommand,
                   &AddQuantizeCommand, &AddDetokenizeCommand}) {
    const size_t before = app.get_subcommands({}).size();
    Runner runner = add(app);
    runners[app.get_subcommands({})[before]] = std::move(runner);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  if (verbose) petrel::SetLogLevel(petrel::LogLevel::kInfo);
  for (auto& [command, runner] : runners) {
    if (command->parsed()) return runner();
  }
  return 1;
}
