// The `petrel` command end to end: greedy runs against golden/story/greedy.jsonl, logits files,
// tokenize/info/synth/bench output, and one-line errors with exit status 1 on bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "util/cli_runner.h"
#include "util/parity.h"
#include "util/test_data.h"

namespace petrel {
namespace {

using testing::ExpectOneLineError;
using testing::Output;
using testing::Petrel;
using testing::SharedDir;
std::string Story() { return testing::StoryHf(); }
std::string StoryGguf() { return testing::StoryF32Gguf(); }

TEST(Cli, RunGreedyReproducesGoldenFromBothSources) {
  for (const std::string& model : {Story(), StoryGguf()}) {
    for (const auto& line : testing::ReadJsonLines(SharedDir() + "/golden/story/greedy.jsonl")) {
      const Output output = Petrel({"run", "-m", model, "-p", line["prompt"].get<std::string>(), "-n",
                                    "64", "--temp", "0", "-t", "2", "--json"});
      ASSERT_EQ(output.exit_code, 0) << output.err;
      const auto json = nlohmann::json::parse(output.out, nullptr, false);
      ASSERT_TRUE(json.is_object()) << output.out;
      EXPECT_EQ(json["prompt_ids"], line["prompt_ids"]) << model;
      EXPECT_EQ(json["new_ids"], line["new_ids"]) << model << " prompt " << line["prompt"];
      EXPECT_EQ(json["text"], line["text"]) << model;
      EXPECT_EQ(json["stop_reason"], line["stopped_at_eos"].get<bool>() ? "eos" : "length");
    }
  }
}

TEST(Cli, RunStreamsTextAndTimings) {
  const Output output = Petrel({"run", "-m", StoryGguf(), "-p", "Once upon a time", "-n", "8", "--temp", "0"});
  ASSERT_EQ(output.exit_code, 0) << output.err;
  EXPECT_FALSE(output.out.empty());
  EXPECT_NE(output.err.find("tokens/s"), std::string::npos) << output.err;
}

TEST(Cli, SeededSamplingIsReproducible) {
  std::vector<std::string> args = {"run", "-m", StoryGguf(), "-p", "The dog", "-n", "24", "--temp",
                                   "1.0", "--top-k", "50", "--top-p", "0.9", "--seed", "7", "--json"};
  const Output a = Petrel(args), b = Petrel(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["new_ids"], nlohmann::json::parse(b.out)["new_ids"]);
}

TEST(Cli, SeededSamplingIsTheSameOnOneAndTwoThreads) {
  auto run = [](const char* threads) {
    const Output out = Petrel({"run", "-m", StoryGguf(), "-p", "Tim and Sue", "-n", "40", "--temp", "0.9",
                               "--top-k", "0", "--top-p", "0.95", "--min-p", "0.02", "--repeat-penalty", "1.1",
                               "--seed", "1234", "-t", threads, "--json"});
    EXPECT_EQ(out.exit_code, 0) << out.err;
    return nlohmann::json::parse(out.out)["new_ids"];
  };
  const auto one = run("1");
  EXPECT_EQ(one, run("2"));
  EXPECT_EQ(one, run("1"));
}

TEST(Cli, StopStringSpanningTokensEndsTheText) {
  // Greedy from the empty prompt reads "Once upon a time, there was a little girl named Lily."
  const Output out = Petrel({"run", "-m", StoryGguf(), "-p", "", "-n", "64", "--temp", "0", "--stop",
                             "named Lily. She had", "--json"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto json = nlohmann::json::parse(out.out);
  EXPECT_EQ(json["stop_reason"], "stop");
  // Tokens: "little▁girl▁named▁" "Lily.▁She▁" "had▁a▁": the stop string spans three of them.
  EXPECT_EQ(json["text"], "Once upon a time, there was a little girl ");
  // The stop string was completed by a token that does not hold all of it.
  const Output last = Petrel({"detokenize", "-m", StoryGguf(), std::to_string(json["new_ids"].back().get<int>())});
  ASSERT_EQ(last.exit_code, 0) << last.err;
  EXPECT_EQ(last.out.find("named Lily. She had"), std::string::npos) << last.out;
}

TEST(Cli, LogitBiasBansATokenAndLogprobsAreReported) {
  // Greedy's first token after BOS is 147; banning it must change the first token.
  const Output out = Petrel({"run", "-m", StoryGguf(), "-p", "", "-n", "3", "--temp", "0", "-l", "147-inf",
                             "--n-probs", "2", "--json"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  const auto json = nlohmann::json::parse(out.out);
  EXPECT_NE(json["new_ids"][0], 147);
  ASSERT_EQ(json["logprobs"].size(), 3u);
  EXPECT_EQ(json["logprobs"][0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(json["logprobs"][0]["top_logprobs"][0]["id"], 147);  // of the raw distribution
}

TEST(Cli, BeamSearchIsDeterministicAndAtLeastAsLikelyAsGreedy) {
  auto beams = [](const char* n) {
    const Output out = Petrel({"run", "-m", StoryGguf(), "-p", "The cat", "-n", "12", "--beams", n, "--json"});
    EXPECT_EQ(out.exit_code, 0) << out.err;
    return nlohmann::json::parse(out.out);
  };
  const auto four = beams("4");
  EXPECT_EQ(four, beams("4"));
  const auto one = beams("1");
  EXPECT_GE(four["logprob"].get<double>(), one["logprob"].get<double>() - 1e-4);
  const Output greedy = Petrel({"run", "-m", StoryGguf(), "-p", "The cat", "-n", "12", "--temp", "0", "--json"});
  EXPECT_EQ(one["new_ids"], nlohmann::json::parse(greedy.out)["new_ids"]);
}

TEST(Cli, TemplateRendersFromFileAndContext) {
  const std::string dir = testing::ScratchDir();
  const std::string tpl = dir + "/petrel_cli_template.jinja", ctx = dir + "/petrel_cli_context.json";
  std::ofstream(tpl) << "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}"
                        "{% if add_generation_prompt %}<assistant>{% endif %}";
  std::ofstream(ctx) << R"({"messages": [{"role": "user", "content": " héllo "}], "add_generation_prompt": true, "bos_token": "<s>"})";
  const Output out = Petrel({"template", "--chat-template-file", tpl, "--context", ctx});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out, "<s><user>héllo</user><assistant>");
  // One-shot chat through a template file.
  std::ofstream(tpl) << "{% for m in messages %}{{ m.content }} {% endfor %}";
  const Output chat = Petrel({"run", "-m", StoryGguf(), "--chat", "--chat-template-file", tpl, "-p",
                              "Once upon a time", "--system", "Tell a story.", "-n", "4", "--temp", "0", "--json"});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const Output rendered = Petrel({"tokenize", "-m", StoryGguf(), "Tell a story. Once upon a time "});
  EXPECT_EQ(nlohmann::json::parse(chat.out)["prompt_ids"], nlohmann::json::parse(rendered.out)) << chat.out;
  std::ofstream(tpl) << "{% for m in messages %}{{ m.content }";
  ExpectOneLineError(Petrel({"template", "--chat-template-file", tpl, "--context", ctx}), "");
  std::remove(tpl.c_str());
  std::remove(ctx.c_str());
}

TEST(Cli, LogitsFileMatchesGolden) {
  const nlohmann::json cases = testing::ReadJson(SharedDir() + "/golden/story/logits.json");
  const auto& entry = cases[2];
  std::string ids;
  for (const auto& id : entry["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  const std::string out = testing::ScratchDir() + "/petrel_cli_logits.f32";
  const std::vector<float> want =
      testing::ReadF32File(SharedDir() + "/golden/story/" + entry["file"].get<std::string>());
  for (const std::string& model : {Story(), StoryGguf()}) {
    // An F32 KV cache keeps the whole path in f32: the golden README's F32 row.
    Output output = Petrel({"logits", "-m", model, "--ids", ids, "-o", out, "--cache-type", "f32"});
    ASSERT_EQ(output.exit_code, 0) << output.err;
    auto stats = testing::CompareLogits(testing::ReadF32File(out), want, 2048);
    EXPECT_TRUE(testing::Within(stats, testing::kF32Tolerance)) << stats.ToString();
    // The default F16 KV cache (as llama.cpp's): the README's F16 KV row.
    output = Petrel({"logits", "-m", model, "--ids", ids, "-o", out});
    ASSERT_EQ(output.exit_code, 0) << output.err;
    stats = testing::CompareLogits(testing::ReadF32File(out), want, 2048);
    EXPECT_TRUE(testing::Within(stats, testing::kF16Tolerance)) << stats.ToString();
  }
  std::remove(out.c_str());
}

TEST(Cli, TokenizeAndInfo) {
  const Output tokens = Petrel({"tokenize", "-m", Story(), "One day, Tim went to the park with his mom."});
  ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
  EXPECT_EQ(tokens.out, "[1,80,299,285,1482,1943,10]\n");
  const Output info = Petrel({"info", "-m", StoryGguf()});
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_NE(info.out.find("layers           2"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("KV cache"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("mat_mul: f32 FMA tiles"), std::string::npos) << info.out;
}

// `petrel info` names OLMo 2, Granite and SmolLM3 and their variants, from GGUF and HF folders.
TEST(Cli, InfoShowsOlmo2GraniteSmolLm3) {
  const struct {
    const char* arch;
    std::vector<std::string> lines;
  } cases[] = {
      {"olmo2", {"architecture     olmo2", "block norms      after attention and FFN (post-norm)"}},
      {"granite",
       {"architecture     granite", "residual scale   x0.22, logits divided by 8",
        "scales           embedding x12, attention 0.0625"}},
      {"smollm3", {"architecture     smollm3", "nope layers      3 of 4 (no rope)"}},
  };
  for (const auto& c : cases) {
    for (const char* suffix : {".gguf", "-hf"}) {
      const std::string model = SharedDir() + "/models/synth-arch2/" + c.arch + suffix;
      const Output info = Petrel({"info", "-m", model});
      ASSERT_EQ(info.exit_code, 0) << model << ": " << info.err;
      for (const std::string& line : c.lines) {
        EXPECT_NE(info.out.find(line), std::string::npos) << model << ": " << info.out;
      }
    }
  }
}

TEST(Cli, SynthWritesARunnableModel) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_synth.gguf";
  const Output synth = Petrel({"synth", "--shape", "64x2x4x2x96", "--type", "f16", "--vocab", StoryGguf(), "-o", path});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const Output run = Petrel({"run", "-m", path, "-p", "Once", "-n", "4", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const Output bench = Petrel({"bench", "-m", path, "-p", "16", "-n", "4", "-r", "2", "-t", "1,2", "--json"});
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_EQ(std::count(bench.out.begin(), bench.out.end(), '\n'), 4) << bench.out;
  std::remove(path.c_str());
}

// Ternary weights (their rows checked in quantize_model_test) in TQ2_0 run; the option names
// its values when given another.
TEST(Cli, SynthTernaryWeightsRun) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_synth_ternary.gguf";
  const Output synth = Petrel({"synth", "--shape", "256x1x4x2x512", "--type", "tq2_0", "--weights",
                               "ternary", "--n-vocab", "300", "-o", path});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  const Output run =
      Petrel({"run", "-m", path, "-p", "Once", "-n", "4", "--temp", "0", "-t", "2", "--json"});
  std::remove(path.c_str());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(nlohmann::json::parse(run.out)["new_ids"].empty()) << run.out;
  ExpectOneLineError(Petrel({"synth", "--shape", "small", "--weights", "binary", "-o", path}),
                     "--weights");
}

// Types written only with an importance matrix are refused by name before anything is written,
// never a failed check halfway through the file.
TEST(Cli, SynthRefusesTypesThatNeedAnImportanceMatrix) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_synth_iq.gguf";
  for (const char* type : {"iq3_xxs", "iq2_xxs", "iq1_s"}) {
    const Output synth =
        Petrel({"synth", "--shape", "256x1x4x2x512", "--type", type, "--n-vocab", "300", "-o", path});
    ExpectOneLineError(synth, "importance matrix");
    std::ifstream written(path);
    EXPECT_FALSE(written.good()) << type << ": a file was left at " << path;
  }
}

// A 1.1B-parameter F16 model (2.2 GB): the weights must be used from the mapping, so peak RSS
// stays below the file size + 15 % (a copy would double it).
TEST(Cli, TinyllamaF16WeightsAreMappedNotCopied) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_tinyllama_f16.gguf";
  const Output synth = Petrel({"synth", "--shape", "tinyllama", "--type", "f16", "--vocab",
                               SharedDir() + "/golden/tokenizer/ggml-vocab-llama-spm.gguf", "-o", path});
  ASSERT_EQ(synth.exit_code, 0) << synth.err;
  std::ifstream file(path, std::ios::binary | std::ios::ate);
  const double file_bytes = double(file.tellg());
  const Output run = Petrel({"run", "-m", path, "-p", "Hello world", "-n", "4", "-c", "256", "-t", "2", "--json"});
  std::remove(path.c_str());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  const double rss = json["timings"]["peak_rss_bytes"].get<double>();
  std::printf("tinyllama F16: file %.0f MB, peak RSS %.0f MB (%.3f x file)\n", file_bytes / 1e6, rss / 1e6, rss / file_bytes);
  EXPECT_LT(rss, file_bytes * 1.15);
  EXPECT_GT(rss, file_bytes * 0.5);  // the weights were really read
}

TEST(Cli, BadInputGivesOneLineErrors) {
  ExpectOneLineError(Petrel({"run", "-m", "/nonexistent/model.gguf", "-p", "x"}), "no such file");
  const std::string junk = testing::ScratchDir() + "/petrel_cli_junk.gguf";
  { std::ofstream(junk) << "GGUF\x03\0\0\0 truncated"; }
  ExpectOneLineError(Petrel({"run", "-m", junk, "-p", "x"}), "gguf");
  { std::ofstream(junk) << "not a model at all"; }
  ExpectOneLineError(Petrel({"info", "-m", junk}), "magic");
  std::remove(junk.c_str());
  ExpectOneLineError(Petrel({"logits", "-m", StoryGguf(), "--ids", "1,x", "-o", "/dev/null"}), "--ids");
  ExpectOneLineError(Petrel({"logits", "-m", StoryGguf(), "--ids", "1,99999", "-o", "/dev/null"}), "vocabulary");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--device", "warp"}), "unknown device");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--cache-type", "q3"}), "cache-type");
  ExpectOneLineError(Petrel({"synth", "--shape", "7x1", "-o", "/dev/null"}), "shape");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--mirostat", "1"}), "mirostat");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--samplers", "top_k;magic"}), "unknown sampler");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "-l", "abc"}), "logit-bias");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "-l", "999999+1"}), "vocabulary");
  ExpectOneLineError(Petrel({"run", "-m", StoryGguf(), "-p", "x", "--chat"}), "chat_template");
  ExpectOneLineError(Petrel({"frobnicate"}), "");
}

// `tokenize` options (issue 3): --file, --show-pieces, --parse-special, and their errors.
TEST(Cli, TokenizeFileShowPiecesAndParseSpecial) {
  const std::string path = testing::ScratchDir() + "/petrel_cli_tokenize_" + std::to_string(getpid());
  { std::ofstream(path, std::ios::binary) << "One day, Tim went to the park with his mom."; }
  const Output from_file = Petrel({"tokenize", "-m", Story(), "--file", path});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.err;
  EXPECT_EQ(from_file.out, "[1,80,299,285,1482,1943,10]\n");
  const Output no_bos = Petrel({"tokenize", "-m", Story(), "--no-bos", "--file", path});
  EXPECT_EQ(no_bos.out, "[80,299,285,1482,1943,10]\n");
  ExpectOneLineError(Petrel({"tokenize", "-m", Story(), "--file", path, "extra text"}), "");
  std::remove(path.c_str());
  ExpectOneLineError(Petrel({"tokenize", "-m", Story(), "--file", path}), "cannot open");
  ExpectOneLineError(Petrel({"tokenize", "-m", Story()}), "exactly one");

  // One `id<TAB>piece` line per token; control characters and backslashes are escaped.
  const Output pieces = Petrel({"tokenize", "-m", StoryGguf(), "--show-pieces", "Hi\nx\\y"});
  ASSERT_EQ(pieces.exit_code, 0) << pieces.err;
  EXPECT_EQ(pieces.out.rfind("1\t<|start_story|>\n", 0), 0u) << pieces.out;
  EXPECT_NE(pieces.out.find("\t\\n\n"), std::string::npos) << pieces.out;
  const Output backslash = Petrel({"tokenize", "-m", SharedDir() + "/golden/tokenizer/ggml-vocab-llama-spm.gguf",
                                   "--show-pieces", "--no-bos", "a\\b"});
  EXPECT_NE(backslash.out.find("\t\\\\\n"), std::string::npos) << backslash.out;
  EXPECT_EQ(std::count(pieces.out.begin(), pieces.out.end(), '\n'),
            std::count(pieces.out.begin(), pieces.out.end(), '\t'));

  // A special token spelled in the text is plain text unless --parse-special.
  const Output plain = Petrel({"tokenize", "-m", StoryGguf(), "<|end_story|>x"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find(",2,"), std::string::npos) << plain.out;
  const Output parsed = Petrel({"tokenize", "-m", StoryGguf(), "--parse-special", "<|end_story|>x"});
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err;
  EXPECT_EQ(parsed.out, "[1,2,80,76]\n");
}

TEST(Cli, DetokenizeAcceptsEveryListFormAndRoundTrips) {
  const std::string text = "One day, Tim went to the park with his mom.";
  for (const std::string& model : {Story(), StoryGguf()}) {
    for (const std::vector<std::string>& ids :
         std::vector<std::vector<std::string>>{{"1,80,299,285,1482,1943,10"},
                                               {"1 80 299 285 1482 1943 10"},
                                               {"[1, 80, 299, 285, 1482, 1943, 10]"},
                                               {"1", "80", "299", "285", "1482", "1943", "10"}}) {
      std::vector<std::string> args = {"detokenize", "-m", model};
      args.insert(args.end(), ids.begin(), ids.end());
      const Output output = Petrel(args);
      ASSERT_EQ(output.exit_code, 0) << output.err;
      EXPECT_EQ(output.out, text + "\n") << model << " " << ids[0];
    }
  }
  // Special tokens are skipped unless --keep-special.
  const Output skipped = Petrel({"detokenize", "-m", StoryGguf(), "1,80,299,2"});
  EXPECT_EQ(skipped.out, "One day, \n");
  const Output kept = Petrel({"detokenize", "-m", StoryGguf(), "--keep-special", "1,80,299,2"});
  EXPECT_NE(kept.out.find("<|end_story|>"), std::string::npos) << kept.out;
  // tokenize | detokenize is the identity for a byte-fallback vocabulary.
  const std::string vocab = SharedDir() + "/golden/tokenizer/ggml-vocab-llama-spm.gguf";
  const std::string unicode = "Héllo 🦙 wörld\ttabs  and   spaces";
  const Output ids = Petrel({"tokenize", "-m", vocab, unicode});
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  const Output back = Petrel({"detokenize", "-m", vocab, ids.out});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(back.out, unicode + "\n");
}

TEST(Cli, DetokenizeBadIdsGiveOneLineErrors) {
  ExpectOneLineError(Petrel({"detokenize", "-m", Story(), "1,99999"}), "outside the vocabulary");
  ExpectOneLineError(Petrel({"detokenize", "-m", Story(), "1,x"}), "'x' is not a token id");
  ExpectOneLineError(Petrel({"detokenize", "-m", Story(), "[1,2"}), "JSON array");
  ExpectOneLineError(Petrel({"detokenize", "-m", Story(), "--", "-3"}), "'-3' is not a token id");
  ExpectOneLineError(Petrel({"detokenize", "-m", Story(), "99999999999"}), "not a token id");
  ExpectOneLineError(Petrel({"detokenize", "-m", "/nonexistent/model.gguf", "1"}), "no such file");
  ExpectOneLineError(Petrel({"detokenize", "-m", Story()}), "ids");
}

}  // namespace
}  // namespace petrel
