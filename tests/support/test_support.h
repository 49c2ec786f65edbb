// Helpers shared by the tests: locating inputs (failing loudly when they are missing),
// reading files, running the CLI.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace keel::test {

// Built with KEEL_SANITIZE (the sanitizer run of scripts/proofs.sh), where the engine runs
// several times slower: a test whose length is only there to repeat the same paths may run
// fewer of them, and says so.
inline constexpr bool kSanitized = KEEL_TEST_SANITIZED;

// Path of a required input; the calling test fails (ADD_FAILURE + empty string) if it is absent.
std::string require_file(const std::string& path);
std::string shared_path(const std::string& rel);  // ../shared/<rel>
std::string source_path(const std::string& rel);  // <repo>/<rel>
std::string smollm2_gguf();                       // fetched by scripts/setup.sh
std::string gemma3_gguf();                        // fetched by scripts/setup.sh (models/gemma3.recipe)
std::string tmp_path(const std::string& name);    // inside the build tree
// quant_blocks.gguf, .expected.bin or .index.json: written into the build tree by the CTest
// fixture quant_blocks_fixture (tests/reference/make_quant_golden.py).
std::string quant_blocks_path(const std::string& name);

// Success when `text` contains every one of `facts`, else a failure naming the missing ones and
// showing the text. An error is checked for what a user needs from it (its status apart, the
// names and numbers it reports), so that rewording a message breaks no test.
::testing::AssertionResult mentions(std::string_view text, std::initializer_list<std::string_view> facts);

std::vector<uint8_t> read_bytes(const std::string& path);
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes);

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;  // stdout and stderr together
};
// Runs the `keel` CLI with the given arguments (shell-quoted by the caller).
CommandResult run_cli(const std::string& args);
// stories260K converted to .keel by the CLI, once per process; the calling test fails when the
// checkpoint is missing or the conversion does.
const std::string& stories260k_keel();

}  // namespace keel::test
