// The `petrel` command: one subcommand per task. Results go to stdout, logs to stderr; exit
// status 0 on success, 1 with a one-line "error: …" otherwise. `petrel` alone prints the help on
// stderr and exits 1; `petrel help [SUBCOMMAND]` prints it on stdout and exits 0.
#include <cstdio>
#include <map>
#include <string>

#include "core/base/log.h"
#include "core/format/mapping_fault.h"  // ExitOnMappedFileFault
#include "core/runtime/backend_registry.h"
#include "cpu/kernels.h"  // SimdTargetName
#include "petrel_version.h"
#include "tools/cli_ux.h"
#include "tools/common.h"
#include "tools/llama_flags.h"

namespace {

void PrintVersion() {
  std::string backends;
  for (const std::string& name : petrel::AvailableBackends()) {
    backends += (backends.empty() ? "" : ", ") + name;
  }
  std::printf("petrel %s (git %s)\nSIMD target: %s\nbackends: %s\n", PETREL_VERSION,
              PETREL_GIT_REVISION, petrel::cpu::SimdTargetName().c_str(), backends.c_str());
}

// `petrel help TOPIC`: the subcommand named TOPIC, or null.
CLI::App* FindSubcommand(CLI::App& app, const std::string& name) {
  for (CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == name) return sub;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace petrel::tools;
  // A model file truncated while mapped: one error line and exit 1, not "Bus error".
  petrel::ExitOnMappedFileFault(1);
  CLI::App app{"petrel: run large language models on the CPU"};
  app.name("petrel");
  app.require_subcommand(0, 1);
  bool verbose = false;
  bool version = false;
  const char* kVerboseHelp = "log load details and per-stage timings to stderr";
  app.add_flag("-v,--verbose", verbose, kVerboseHelp);
  app.add_flag("--version", version, "print the version, git revision, SIMD target and backends");
  std::map<CLI::App*, Runner> runners;
  for (auto add : {&AddRunCommand, &AddChatCommand, &AddLogitsCommand, &AddEmbedCommand,
                   &AddTokenizeCommand,
                   &AddInfoCommand, &AddBenchCommand, &AddSynthCommand, &AddTemplateCommand,
                   &AddQuantizeCommand, &AddDetokenizeCommand, &AddPerplexityCommand,
                   &AddImatrixCommand, &AddServeCommand, &AddBenchServeCommand}) {
    const size_t before = app.get_subcommands({}).size();
    Runner runner = add(app);
    CLI::App* command = app.get_subcommands({})[before];
    // -v is accepted after the subcommand too, where llama.cpp users put it.
    command->add_flag("-v,--verbose", verbose, kVerboseHelp);
    runners[command] = std::move(runner);
  }
  CLI::App* help = app.add_subcommand("help", "print this help, or a subcommand's: petrel help run");
  std::string help_topic;
  help->add_option("subcommand", help_topic, "the subcommand to describe");
  CLI::App* version_command = app.add_subcommand("version", "the same as --version");

  // App::help() would describe the selected subcommand (`help` itself) once parsed.
  auto help_text = [&app](CLI::App* command) {
    const std::string name = command == &app ? "petrel" : "petrel " + command->get_name();
    return app.get_formatter()->make_help(command, name, CLI::AppFormatMode::Normal);
  };
  if (argc <= 1) {
    std::fputs(help_text(&app).c_str(), stderr);
    return 1;
  }
  // llama.cpp's spellings first (tools/llama_flags.h), then a misspelled subcommand wherever
  // the first word that is not a top-level flag stands (`petrel serv -m X`, `petrel -v srve`).
  std::vector<std::string> warnings;
  auto translated = TranslateLlamaFlags(std::vector<std::string>(argv + 1, argv + argc), &warnings);
  if (!translated.ok()) {
    std::fprintf(stderr, "error: %s\n", translated.status().message().c_str());
    return 1;
  }
  for (const std::string& warning : warnings) std::fprintf(stderr, "warning: %s\n", warning.c_str());
  for (const std::string& word : *translated) {
    if (word == "-v" || word == "--verbose" || word == "--version") continue;
    if (!word.empty() && word[0] != '-' && !FindSubcommand(app, word)) {
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      const std::string closest = ClosestName(word, names);
      std::fprintf(stderr, "error: unknown subcommand '%s'%s\n", word.c_str(),
                   closest.empty() ? " (see petrel help)" : ("; did you mean " + closest + "?").c_str());
      return 1;
    }
    break;
  }
  std::vector<std::string> reversed(translated->rbegin(), translated->rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // An unknown argument is named first, also when it made a required option look missing
    // (`petrel run --modle X`).
    const CLI::App* where = app.remaining().empty() ? nullptr : &app;
    for (const CLI::App* sub : app.get_subcommands({})) {
      if (sub->parsed() && !sub->remaining().empty()) where = sub;
    }
    std::fprintf(stderr, "error: %s\n", where ? UnknownArgumentMessage(*where).c_str() : e.what());
    return 1;
  }
  if (verbose) petrel::SetLogLevel(petrel::LogLevel::kInfo);
  if (version || version_command->parsed()) {
    PrintVersion();
    return 0;
  }
  if (help->parsed()) {
    if (help_topic.empty()) {
      std::fputs(help_text(&app).c_str(), stdout);
      return 0;
    }
    CLI::App* topic = FindSubcommand(app, help_topic);
    if (!topic) {
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      const std::string closest = ClosestName(help_topic, names);
      std::fprintf(stderr, "error: unknown subcommand '%s'%s\n", help_topic.c_str(),
                   closest.empty() ? " (see petrel help)" : ("; did you mean " + closest + "?").c_str());
      return 1;
    }
    std::fputs(help_text(topic).c_str(), stdout);
    return 0;
  }
  for (auto& [command, runner] : runners) {
    if (command->parsed()) return FinishMpi(runner());
  }
  std::fputs("error: a subcommand is required (see petrel help)\n", stderr);
  return 1;
}
