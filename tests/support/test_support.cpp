#include "support/test_support.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace keel::test {

std::string require_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    ADD_FAILURE() << "required input is missing: " << path
                  << " (run scripts/setup.sh; tests never skip on missing data)";
    return {};
  }
  return path;
}

std::string shared_path(const std::string& rel) { return std::string(KEEL_SHARED_DIR) + "/" + rel; }
std::string source_path(const std::string& rel) { return std::string(KEEL_SOURCE_DIR) + "/" + rel; }
std::string smollm2_gguf() { return KEEL_SMOLLM2_GGUF; }
std::string gemma3_gguf() { return KEEL_GEMMA3_GGUF; }
std::string quant_blocks_path(const std::string& name) { return std::string(KEEL_QUANT_BLOCKS_DIR) + "/" + name; }
// Each test process (CTest runs every test as its own process, several at once) gets a private
// directory, removed when the process exits, so tests never race on shared file names.
std::string tmp_path(const std::string& name) {
  static const std::string dir = [] {
    const std::string d = std::string(KEEL_TEST_TMP_DIR) + "/p" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(std::string(KEEL_TEST_TMP_DIR) + "/p" + std::to_string(getpid()), ec);
    });
    return d;
  }();
  return dir + "/" + name;
}

::testing::AssertionResult mentions(std::string_view text, std::initializer_list<std::string_view> facts) {
  std::string missing;
  for (std::string_view f : facts) {
    if (text.find(f) == std::string_view::npos) missing += (missing.empty() ? "'" : ", '") + std::string(f) + "'";
  }
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "missing " << missing << " in:\n" << text;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

CommandResult run_cli(const std::string& args) {
  CommandResult r;
  std::string cmd = std::string(KEEL_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.signal = WTERMSIG(status);
  }
  return r;
}

const std::string& stories260k_keel() {
  static const std::string path = [] {
    const std::string out = tmp_path("stories260K.keel");
    const auto r =
        run_cli("convert '" + require_file(shared_path("models/stories260K/stories260K.bin")) + "' --tokenizer '" +
                require_file(shared_path("models/stories260K/tok512.bin")) + "' -o '" + out + "' -q");
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return out;
  }();
  return path;
}

}  // namespace keel::test
