// Tokenizer inputs for the text tests, independent of the converter's readers: small loaders
// for a Hugging Face tokenizer.json, a llama2.c tokenizer.bin and the vocabulary of a GGUF
// file, and a builder for a stand-alone keel.fb.Tokenizer FlatBuffer.
//
// tests/CMakeLists.txt compiles only test_support.cpp into each test binary, so a test that
// uses these includes tokenizer_fixtures.cpp once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "convert/source_model.h"
#include "keel_generated.h"
#include "text/tokenizer.h"

namespace keel::test {

// Each loader fills `error` and returns false when the file is missing or malformed.
bool load_hf_tokenizer_json(const std::string& dir, convert::SourceTokenizer& out, std::string& error);
bool load_llama2c_tokenizer(const std::string& path, convert::SourceTokenizer& out, std::string& error);
bool load_gguf_vocab(const std::string& path, convert::SourceTokenizer& out, std::string& error);

// A verified FlatBuffer whose root is a keel.fb.Tokenizer.
std::vector<uint8_t> build_tokenizer_table(const convert::SourceTokenizer& tok);

// A tokenizer with its table and arenas, ready to use.
struct LoadedTokenizer {
  std::vector<uint8_t> table;
  std::vector<uint8_t> arena_memory;
  std::vector<uint8_t> scratch_memory;
  Arena arena;
  Arena scratch;
  text::Tokenizer tok;

  // ids of `text`; the test fails on an error.
  std::vector<int32_t> encode(const std::string& text, bool add_bos = false, bool parse_special = false);
  std::string decode(const std::vector<int32_t>& ids, bool print_special = false);
};

// Builds the table, sizes the arenas from Tokenizer::arena_bytes / scratch_bytes and calls
// init(); returns null (after a test failure) on error.
std::unique_ptr<LoadedTokenizer> make_tokenizer(const convert::SourceTokenizer& src);

// The same, from the table the converter writes (keel::convert::build_tokenizer, as write_keel
// stores it).
std::unique_ptr<LoadedTokenizer> make_tokenizer_as_converted(const convert::SourceTokenizer& src);

// Strings of a llama.cpp vocab test file (.inp): texts separated by "\n__ggml_vocab_test__\n".
std::vector<std::string> read_ggml_vocab_inputs(const std::string& path);
// Ids of a llama.cpp vocab test file (.out): one line of space-separated ids per text.
std::vector<std::vector<int32_t>> read_ggml_vocab_outputs(const std::string& path);

}  // namespace keel::test
