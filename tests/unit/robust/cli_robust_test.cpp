// The robustness cases through the `keel` binary on stories260K: a corrupted or missing model
// file, an empty prompt, a KV budget below what the policy keeps are each a non-zero exit with
// exactly one clear line on stderr and nothing on stdout; `-n 0` prints no generated text and
// exits 0. Runs that generate use -t 1 (the defaults' thread count is the machine's, and the
// bytes and statuses checked here do not depend on it).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "unit/robust/robust_util.h"

namespace keel {
namespace {

struct Output {
  int exit_code = -1;
  int signal = 0;
  std::string out, err;
};

std::string q(const std::string& s) { return "'" + s + "'"; }

// Runs `keel ARGS` with stdout and stderr kept apart (test::run_cli merges them).
Output keel_cli(const std::string& args) {
  static int n = 0;
  const std::string err_path = test::tmp_path("cli_stderr_" + std::to_string(n++) + ".txt");
  Output o;
  const std::string cmd = std::string(KEEL_CLI_PATH) + " " + args + " 2>" + q(err_path);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return o;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, p)) > 0) o.out.append(buf, got);
  const int status = pclose(p);
  if (WIFEXITED(status)) o.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) o.signal = WTERMSIG(status);
  std::ifstream f(err_path, std::ios::binary);
  o.err.assign(std::istreambuf_iterator<char>(f), {});
  return o;
}

// A refused command: exit 1 (2 for usage errors), no signal, nothing on stdout and exactly one
// line on stderr, "keel CMD: ..." containing `part`.
void expect_one_line_error(const Output& o, const std::string& cmd, const std::string& part, int code = 1) {
  EXPECT_EQ(o.signal, 0) << o.err;
  EXPECT_EQ(o.exit_code, code) << o.err;
  EXPECT_EQ(o.out, "") << "stdout of a refused command";
  ASSERT_FALSE(o.err.empty());
  EXPECT_EQ(o.err.find('\n'), o.err.size() - 1) << "more than one line:\n" << o.err;
  EXPECT_EQ(o.err.rfind("keel " + cmd + ": ", 0), 0u) << o.err;
  EXPECT_NE(o.err.find(part), std::string::npos) << "'" << o.err << "' lacks '" << part << "'";
}

// stories260K written once per process; `edit` variants go to their own files.
std::string write_variant(const std::string& name, void (*edit)(std::vector<uint8_t>&)) {
  std::vector<uint8_t> bytes = robust::stories_keel_bytes();
  EXPECT_FALSE(bytes.empty());
  if (edit && !bytes.empty()) edit(bytes);
  const std::string path = test::tmp_path(name);
  test::write_bytes(path, bytes);
  return path;
}

const std::string& stories() {
  static const std::string path = write_variant("cli_stories.keel", nullptr);
  return path;
}

TEST(CliRobust, CorruptedModelFilesAreOneLineErrors) {
  // `part` is what the structural checks say (keel info, keel run --no-verify); keel run checks
  // the checksums first and names the part of the file a flip is in (`verified`), or says
  // `part` too where the file's shape, not its bytes, is wrong.
  struct Case {
    const char* name;
    void (*edit)(std::vector<uint8_t>&);
    const char* part;
    const char* verified;
  };
  const Case cases[] = {
      {"truncated", [](std::vector<uint8_t>& b) { b.resize(b.size() / 2); }, "model truncated", "model truncated"},
      {"identifier", [](std::vector<uint8_t>& b) { b[5] ^= 0x20; }, "not a .keel file", "checksum mismatch: header"},
      {"empty", [](std::vector<uint8_t>& b) { b.clear(); }, "model truncated", "model truncated"},
      {"metadata", [](std::vector<uint8_t>& b) { b[0] ^= 0x40; }, "failed verification", "checksum mismatch: header"},
      {"trailing bytes", [](std::vector<uint8_t>& b) { b.insert(b.end(), 100, 0); }, "follow the checksum trailer",
       "follow the checksum trailer"},
      {"unknown default KV policy",
       [](std::vector<uint8_t>& b) {
         robust::Image img(b);
         img.meta()->mutable_kv_defaults()->mutate_policy(static_cast<fb::KvPolicy>(9));
         memcpy(b.data(), img.bytes(), b.size());
       },
       "kv_defaults.policy = 9 is unknown", "checksum mismatch: metadata"},
      {"overlapping tensors",
       [](std::vector<uint8_t>& b) {
         robust::Image img(b);
         auto* t = img.meta()->mutable_tensors();
         t->GetMutableObject(3)->mutate_offset(t->Get(2)->offset());
         memcpy(b.data(), img.bytes(), b.size());
       },
       "tensor duplicated", "checksum mismatch: tensor table"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = write_variant(std::string("cli_bad_") + c.name + ".keel", c.edit);
    const Output run = keel_cli("run -m " + q(path) + " -p 'Once upon a time' -n 4 -t 1");
    expect_one_line_error(run, "run", c.verified);
    EXPECT_NE(run.err.find(path), std::string::npos) << "the message names the file: " << run.err;
    expect_one_line_error(keel_cli("run -m " + q(path) + " -p 'Once upon a time' -n 4 -t 1 --no-verify"), "run",
                          c.part);
    expect_one_line_error(keel_cli("info " + q(path)), "info", c.part);
  }
  // No file, or not a regular file.
  expect_one_line_error(keel_cli("run -m " + q(test::tmp_path("no_such.keel")) + " -p hi"), "run", "cannot open");
  expect_one_line_error(keel_cli("run -m " + q(test::tmp_path("")) + " -p hi"), "run", "not a regular file");
  // A flip in the tensor data is not structure: it is found by the checksums, and with
  // --no-verify the file loads and runs.
  const std::string data_flip = write_variant("cli_data_flip.keel", [](std::vector<uint8_t>& b) {
    robust::Image img(b);
    b[img.meta()->data_offset() + img.meta()->data_size() - 100] ^= 0x5a;
  });
  expect_one_line_error(keel_cli("run -m " + q(data_flip) + " -p 'Once upon a time' -n 4 -t 1"), "run",
                        "checksum mismatch: tensor ");
  const Output ok = keel_cli("run -m " + q(data_flip) + " -p 'Once upon a time' -n 4 -t 1 --no-verify");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST(CliRobust, EmptyPrompt) {
  // stories260K asks for BOS: the empty prompt is BOS alone, a valid request (generation from
  // the start of a text), so it runs.
  const Output bos = keel_cli("run -m " + q(stories()) + " -p '' -n 4 -t 1 --temp 0 --json");
  ASSERT_EQ(bos.exit_code, 0) << bos.err;
  const nlohmann::json j = nlohmann::json::parse(bos.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << bos.out;
  EXPECT_EQ(j["prompt_tokens"], 1);
  // A model that does not ask for BOS encodes the empty prompt to nothing: a clear refusal.
  // (The edited flag breaks the tokenizer's checksum, so the check is skipped.)
  const std::string no_bos = write_variant("cli_no_bos.keel", [](std::vector<uint8_t>& b) {
    robust::Image img(b);
    img.meta()->mutable_tokenizer()->mutate_add_bos(false);
    memcpy(b.data(), img.bytes(), b.size());
  });
  expect_one_line_error(keel_cli("run -m " + q(no_bos) + " -p '' -t 1 --no-verify"), "run", "encodes to no tokens");
  const std::string empty_file = test::tmp_path("cli_empty_prompt.txt");
  test::write_bytes(empty_file, {});
  expect_one_line_error(keel_cli("run -m " + q(no_bos) + " -f " + q(empty_file) + " -t 1 --no-verify"), "run",
                        "encodes to no tokens");
}

TEST(CliRobust, BudgetBelowWhatThePolicyKeeps) {
  // snapstream (the model's default policy): 4 sinks + 32-token observation window + budget/4.
  expect_one_line_error(keel_cli("run -m " + q(stories()) + " -p hi --kv-budget 40 -t 1"), "run",
                        "budget too small: snapstream keeps 4 sinks + a 32-token observation window + a 10-token "
                        "recent window; a budget of 40 tokens");
  expect_one_line_error(
      keel_cli("run -m " + q(stories()) + " -p hi --kv-policy streaming --sinks 8 --kv-budget 8 -t 1"), "run",
      "budget too small: streaming needs a budget above its 8 sinks; got 8 tokens");
  // `full` refuses a prompt longer than the budget before starting.
  expect_one_line_error(keel_cli("run -m " + q(stories()) +
                                 " -p 'Once upon a time there was a dog' --kv-policy full "
                                 "--kv-budget 3 -t 1"),
                        "run", "exceeds the KV budget of 3 tokens");
  // A budget whose arenas exceed the machine's memory is refused before anything is touched
  // (4e9 tokens of stories260K's KV: 2.7 TiB), not left to the OOM killer.
  expect_one_line_error(keel_cli("run -m " + q(stories()) + " -p hi --kv-policy full --kv-budget 4000000000 -t 1"),
                        "run", "of arenas (KV budget 4000000000 tokens); this machine has");
  // chat needs a chat model; stories260K is not one.
  expect_one_line_error(keel_cli("chat -m " + q(stories()) + " -p hi -t 1"), "chat", "needs a chat model");
}

TEST(CliRobust, ZeroTokensToPredict) {
  const Output plain = keel_cli("run -m " + q(stories()) + " -p 'Once upon a time' -n 0 -t 1");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.signal, 0);
  EXPECT_EQ(plain.out, "\n") << "-n 0 generates nothing (the newline ends the empty output)";
  EXPECT_NE(plain.err.find("generated 0 tokens"), std::string::npos) << plain.err;
  const Output json = keel_cli("run -m " + q(stories()) + " -p 'Once upon a time' -n 0 -t 1 --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const nlohmann::json j = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.out;
  EXPECT_EQ(j["text"], "");
  EXPECT_EQ(j["tokens"].size(), 0u);
  EXPECT_EQ(j["generated_tokens"], 0);
  EXPECT_GT(j["prompt_tokens"].get<int>(), 1);
  // With the full policy the budget defaults to prompt + N = the prompt alone, which fits.
  const Output full = keel_cli("run -m " + q(stories()) + " -p 'Once upon a time' -n 0 -t 1 --kv-policy full");
  EXPECT_EQ(full.exit_code, 0) << full.err;
  EXPECT_EQ(full.out, "\n");
}

}  // namespace
}  // namespace keel
