// tokenizer.json: model.vocab and added_tokens give every id its text (ids contiguous, none past
// config.json's embedding rows); model.merges, as "a b" or [a, b], in rank order; the
// pre_tokenizer, decoder and normalizer tell a byte-level BPE (GPT-2, SmolLM, Llama 3, Qwen2
// pre-tokenization) from a SentencePiece-style one (byte_fallback, U+2581 word marker).
// tokenizer_config.json, when present, names the special tokens by text and may set
// add_bos_token and carry the chat template; chat_template.jinja is the template's other home.
#include "convert/hf_tokenizer.h"

#include <cctype>
#include <exception>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "convert/source_file.h"

namespace keel::convert::hf {
namespace {

// keel.fb.TokenType (GGUF numbering).
constexpr uint8_t kTokNormal = 1, kTokUnknown = 2, kTokControl = 3, kTokUserDefined = 4, kTokUnused = 5, kTokByte = 6;

const char* const kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's word marker

bool is_type(const json* v, const char* type) {
  const json* t = v ? member(*v, "type") : nullptr;
  return t && *t == type;
}

// The pre-tokenizers of `pre` as a flat list (a Sequence is expanded, one level).
std::vector<const json*> pre_tokenizers(const json* pre) {
  std::vector<const json*> out;
  if (!pre) return out;
  if (is_type(pre, "Sequence")) {
    if (const json* list = member(*pre, "pretokenizers"); list && list->is_array())
      for (const json& p : *list) out.push_back(&p);
  } else {
    out.push_back(pre);
  }
  return out;
}

bool contains_type(const json* v, const char* type, const char* list_key) {
  if (!v) return false;
  if (is_type(v, type)) return true;
  if (const json* list = member(*v, list_key); list && list->is_array())
    for (const json& p : *list)
      if (is_type(&p, type)) return true;
  return false;
}

std::string split_regex(const json& p) {
  const json* pat = member(p, "pattern");
  const json* re = pat ? member(*pat, "Regex") : nullptr;
  return re && re->is_string() ? re->get<std::string>() : std::string();
}

bool classify_byte_level(const json* pre, PreTokenizer& out, std::string& error) {
  static const char* const kContractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::vector<const json*> parts = pre_tokenizers(pre);
  bool byte_level = false, digits = false;
  std::vector<std::string> regexes;
  std::string found;
  for (const json* p : parts) {
    const json* t = member(*p, "type");
    found += (found.empty() ? "" : ", ") + (t ? short_dump(*t) : std::string("?"));
    if (is_type(p, "ByteLevel")) {
      byte_level = true;
    } else if (is_type(p, "Digits")) {
      const json* ind = member(*p, "individual_digits");
      if (!ind || *ind != true) {
        error = "tokenizer.json: Digits pre-tokenizer without individual_digits is not supported";
        return false;
      }
      digits = true;
    } else if (is_type(p, "Split")) {
      regexes.push_back(split_regex(*p));
      found.append(" ").append(short_dump(regexes.back()));
    } else {
      byte_level = false;
      break;
    }
  }
  if (byte_level && parts.size() == 1) {
    out = PreTokenizer::Gpt2;
    return true;
  }
  if (byte_level && digits && parts.size() == 2) {
    out = PreTokenizer::SmolLM;
    return true;
  }
  if (byte_level && regexes.size() == 1 && parts.size() == 2) {
    const std::string& re = regexes[0];
    if (re.find(kContractions) != std::string::npos) {
      if (re.find("\\p{N}{1,3}") != std::string::npos) {
        out = PreTokenizer::Llama3;
        return true;
      }
      if (re.find("|\\p{N}|") != std::string::npos) {
        out = PreTokenizer::Qwen2;
        return true;
      }
    }
  }
  error =
      "tokenizer.json: byte-level pre-tokenizer not recognized (expected ByteLevel, Digits + "
      "ByteLevel, or a Llama-3 / Qwen2 Split regex + ByteLevel); found: " +
      (found.empty() ? std::string("none") : found);
  return false;
}

// The text of a special token given as a string or as {"content": ...}.
std::string token_text(const json* v) {
  if (!v) return {};
  if (v->is_string()) return v->get<std::string>();
  if (const json* c = member(*v, "content"); c && c->is_string()) return c->get<std::string>();
  return {};
}

bool read_tokenizer(const json& tj, const json& tcfg, const ConfigIds& ids, uint32_t vocab_rows, SourceTokenizer& tok,
                    std::string& error) {
  auto fail = [&](const std::string& what) {
    error = "tokenizer.json: " + what;
    return false;
  };
  const json* model = member(tj, "model");
  if (!model || !model->is_object()) return fail("missing 'model'");
  const json* mtype = member(*model, "type");
  if (!mtype || *mtype != "BPE")
    return fail("model type " + (mtype ? short_dump(*mtype) : std::string("(none)")) +
                " is not supported (expected \"BPE\")");
  const json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object()) return fail("model.vocab is not an object");

  // id -> text, from the vocabulary and the added tokens.
  std::vector<std::string> texts;
  std::vector<uint8_t> assigned, special, added;
  auto put = [&](const std::string& text, const json& idv, bool is_added, bool is_special) {
    uint64_t id;
    if (!as_u64(idv, id) || id >= vocab_rows)
      return fail("token '" + text + "' has id " + short_dump(idv) + ", outside the " + std::to_string(vocab_rows) +
                  " embedding rows of config.json vocab_size");
    if (id >= texts.size()) {
      texts.resize(id + 1);
      assigned.resize(id + 1, 0);
      special.resize(id + 1, 0);
      added.resize(id + 1, 0);
    }
    if (assigned[id] && texts[id] != text)
      return fail("id " + std::to_string(id) + " is both '" + texts[id] + "' and '" + text + "'");
    texts[id] = text;
    assigned[id] = 1;
    if (is_added) added[id] = 1;
    if (is_special) special[id] = 1;
    return true;
  };
  for (const auto& [text, idv] : vocab->items())
    if (!put(text, idv, false, false)) return false;
  if (const json* at = member(tj, "added_tokens")) {
    if (!at->is_array()) return fail("added_tokens is not a list");
    for (const json& a : *at) {
      const json* content = member(a, "content");
      const json* idv = member(a, "id");
      if (!content || !content->is_string() || !idv)
        return fail("added token " + short_dump(a) + " lacks id or content");
      const json* sp = member(a, "special");
      if (!put(content->get<std::string>(), *idv, true, sp && *sp == true)) return false;
    }
  }
  for (size_t i = 0; i < texts.size(); ++i)
    if (!assigned[i]) return fail("no token has id " + std::to_string(i) + " (ids must be contiguous)");
  std::map<std::string, int32_t> id_of;
  for (size_t i = 0; i < texts.size(); ++i) id_of.emplace(texts[i], int32_t(i));
  auto lookup = [&](const std::string& text) {
    auto it = id_of.find(text);
    return it == id_of.end() ? -1 : it->second;
  };

  // Merges, as "a b" in rank order.
  std::vector<std::string> merges;
  if (const json* mj = member(*model, "merges")) {
    if (!mj->is_array()) return fail("model.merges is not a list");
    merges.reserve(mj->size());
    for (const json& e : *mj) {
      if (e.is_string()) {
        merges.push_back(e.get<std::string>());
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        const std::string a = e[0].get<std::string>(), b = e[1].get<std::string>();
        if (a.find(' ') != std::string::npos || b.find(' ') != std::string::npos)
          return fail("merge " + short_dump(e) + " contains a space and cannot be written as \"a b\"");
        merges.push_back(a + " " + b);
      } else {
        return fail("merge " + short_dump(e) + " is neither \"a b\" nor [a, b]");
      }
    }
  }

  const json* pre = member(tj, "pre_tokenizer");
  const json* dec = member(tj, "decoder");
  const json* norm = member(tj, "normalizer");
  const bool byte_level =
      contains_type(pre, "ByteLevel", "pretokenizers") || contains_type(dec, "ByteLevel", "decoders");
  const json* fallback = member(*model, "byte_fallback");
  bool sp_normalizer = false, sp_prefix = false;
  if (norm) {
    std::vector<const json*> ns;
    if (is_type(norm, "Sequence")) {
      if (const json* list = member(*norm, "normalizers"); list && list->is_array())
        for (const json& n : *list) ns.push_back(&n);
    } else {
      ns.push_back(norm);
    }
    for (const json* n : ns) {
      if (is_type(n, "Replace")) {
        const json* content = member(*n, "content");
        if (content && *content == kSpaceMarker) sp_normalizer = true;
      }
      if (is_type(n, "Prepend")) {
        const json* p = member(*n, "prepend");
        if (p && *p == kSpaceMarker) sp_prefix = true;
      }
    }
  }
  for (const json* p : pre_tokenizers(pre)) {
    if (is_type(p, "Metaspace")) {
      sp_normalizer = true;
      const json* scheme = member(*p, "prepend_scheme");
      const json* add = member(*p, "add_prefix_space");
      if ((scheme && (*scheme == "always" || *scheme == "first")) || (!scheme && add && *add == true)) sp_prefix = true;
    }
  }

  tok.tokens = std::move(texts);
  tok.token_types.assign(tok.tokens.size(), kTokNormal);
  for (size_t i = 0; i < tok.tokens.size(); ++i)
    if (added[i]) tok.token_types[i] = special[i] ? kTokControl : kTokUserDefined;

  if (byte_level) {
    tok.kind = TokenizerKind::ByteLevelBpe;
    if (!classify_byte_level(pre, tok.pre, error)) return false;
    tok.merges = std::move(merges);
    tok.add_space_prefix = false;
    for (const json* p : pre_tokenizers(pre)) {
      if (is_type(p, "ByteLevel")) {
        const json* add = member(*p, "add_prefix_space");
        tok.add_space_prefix = add && *add == true;
      }
    }
  } else if (fallback && *fallback == true && sp_normalizer) {
    tok.kind = TokenizerKind::SentencePieceBpe;
    tok.pre = PreTokenizer::None;
    tok.add_space_prefix = sp_prefix;
    // BPE tokenizer.json carries no piece scores; merge priority is the merge rank. A token a
    // merge produces scores -(rank of the first merge producing it); every other token
    // (bytes, single characters, specials) scores -(merge count + id), below every merge
    // result, so a score-driven merger prefers merges in the tokenizer's own order.
    const float n_merges = float(merges.size());
    tok.scores.assign(tok.tokens.size(), 0.0f);
    std::vector<uint8_t> scored(tok.tokens.size(), 0);
    for (size_t r = 0; r < merges.size(); ++r) {
      const std::string& mrg = merges[r];
      const size_t sp = mrg.find(' ');
      if (sp == std::string::npos) return fail("merge '" + mrg + "' is not \"a b\"");
      const int32_t id = lookup(mrg.substr(0, sp) + mrg.substr(sp + 1));
      if (id >= 0 && !scored[id]) {
        tok.scores[id] = -float(r);
        scored[id] = 1;
      }
    }
    for (size_t i = 0; i < tok.tokens.size(); ++i)
      if (!scored[i]) tok.scores[i] = -(n_merges + float(i));
    for (size_t i = 0; i < tok.tokens.size(); ++i) {
      const std::string& t = tok.tokens[i];
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && isxdigit(uint8_t(t[3])) &&
          isxdigit(uint8_t(t[4])))
        tok.token_types[i] = kTokByte;
    }
  } else {
    return fail(
        "neither byte-level BPE (ByteLevel pre-tokenizer or decoder) nor SentencePiece-style "
        "BPE (byte_fallback with a U+2581 Replace normalizer or Metaspace); found pre_tokenizer " +
        (pre ? short_dump(*pre) : std::string("null")) + ", normalizer " +
        (norm ? short_dump(*norm) : std::string("null")));
  }

  if (const json* unk = member(*model, "unk_token"); unk && unk->is_string()) {
    tok.unk_id = lookup(unk->get<std::string>());
    if (tok.unk_id >= 0) tok.token_types[size_t(tok.unk_id)] = kTokUnknown;
  }

  // Special ids: tokenizer_config.json's token texts first (for chat models they name the
  // end-of-turn token), then config.json's ids (the first one when eos_token_id is a list).
  // A pad token missing from the vocabulary only means there is none.
  auto special_id = [&](const char* cfg_key, int64_t from_config, bool required, int32_t& out) {
    const std::string text = token_text(member(tcfg, cfg_key));
    if (!text.empty()) {
      out = lookup(text);
      if (out < 0 && required)
        return fail(std::string("tokenizer_config.json ") + cfg_key + " '" + text + "' is not in the vocabulary");
      return true;
    }
    out = int32_t(from_config);
    return true;
  };
  if (!special_id("bos_token", ids.bos, true, tok.bos_id) || !special_id("eos_token", ids.eos, true, tok.eos_id) ||
      !special_id("pad_token", ids.pad, false, tok.pad_id))
    return false;
  tok.im_start_id = lookup("<|im_start|>");
  tok.im_end_id = lookup("<|im_end|>");
  // Gemma's turn markers serve where a vocabulary has no ChatML ones (keel chat reads which).
  if (tok.im_start_id < 0) tok.im_start_id = lookup("<start_of_turn>");
  if (tok.im_end_id < 0) tok.im_end_id = lookup("<end_of_turn>");

  if (const json* add = member(tcfg, "add_bos_token"); add && add->is_boolean()) {
    tok.add_bos = add->get<bool>();
  } else if (tok.kind == TokenizerKind::SentencePieceBpe) {
    tok.add_bos = true;
  } else {
    // Byte-level tokenizers that add BOS say so with a template starting with a special token.
    tok.add_bos = false;
    const json* post = member(tj, "post_processor");
    std::vector<const json*> posts;
    if (is_type(post, "Sequence")) {
      if (const json* list = member(*post, "processors"); list && list->is_array())
        for (const json& p : *list) posts.push_back(&p);
    } else if (post) {
      posts.push_back(post);
    }
    for (const json* p : posts) {
      const json* single = is_type(p, "TemplateProcessing") ? member(*p, "single") : nullptr;
      if (single && single->is_array() && !single->empty() && member((*single)[0], "SpecialToken")) tok.add_bos = true;
    }
  }

  // config.json's vocab_size counts embedding rows, which models round up past the
  // tokenizer's last id; the rows without a token get "<unused_N>" placeholders of type
  // Unused so the vocabulary matches the embedding. 0 rows: no embedding to match (the
  // tokenizer read on its own).
  if (vocab_rows == 0) vocab_rows = uint32_t(tok.tokens.size());
  if (tok.tokens.size() < vocab_rows) {
    const size_t have = tok.tokens.size();
    for (size_t i = have; i < vocab_rows; ++i) {
      tok.tokens.push_back("<unused_" + std::to_string(i) + ">");
      tok.token_types.push_back(kTokUnused);
      if (tok.kind == TokenizerKind::SentencePieceBpe) tok.scores.push_back(-(float(merges.size()) + float(i)));
    }
  }
  for (auto [name, id] :
       {std::pair<const char*, int32_t>{"bos", tok.bos_id}, {"eos", tok.eos_id}, {"pad", tok.pad_id}}) {
    if (id >= int32_t(vocab_rows))
      return fail(std::string(name) + " id " + std::to_string(id) + " is outside the vocabulary of " +
                  std::to_string(vocab_rows));
  }
  return true;
}

}  // namespace

bool read_tokenizer_files(const std::string& dir, const ConfigIds& ids, uint32_t vocab_rows, SourceTokenizer& tok,
                          json& tcfg, std::string& error) {
  json tj;
  tcfg = json::object();
  if (!parse_json_file(dir + "/tokenizer.json", tj, error)) return false;
  const std::string tcfg_path = dir + "/tokenizer_config.json";
  if (is_file(tcfg_path) && !parse_json_file(tcfg_path, tcfg, error)) return false;
  return read_tokenizer(tj, tcfg, ids, vocab_rows, tok, error);
}

std::string chat_template(const json& tcfg, const std::string& dir) {
  if (const json* ct = member(tcfg, "chat_template")) {
    if (ct->is_string()) return ct->get<std::string>();
    // A list of named templates: the "default" one, else the first.
    if (ct->is_array()) {
      std::string first;
      for (const json& e : *ct) {
        const json* name = member(e, "name");
        const json* t = member(e, "template");
        if (!t || !t->is_string()) continue;
        if (name && *name == "default") return t->get<std::string>();
        if (first.empty()) first = t->get<std::string>();
      }
      return first;
    }
  }
  const std::string path = dir + "/chat_template.jinja";
  if (is_file(path)) {
    std::string text, error;
    if (read_file(path, text, error, kMaxJsonFile)) return text;
  }
  return {};
}

}  // namespace keel::convert::hf

namespace keel::convert {

std::optional<SourceTokenizer> read_hf_tokenizer(const std::string& dir, std::string& error) {
  try {
    hf::ConfigIds ids;
    uint32_t vocab_rows = 0;
    const std::string config_path = dir + "/config.json";
    if (hf::is_file(config_path)) {
      hf::json config;
      SourceHyper h;
      if (!hf::parse_json_file(config_path, config, error) || !hf::parse_config(config, h, ids, error))
        return std::nullopt;
      vocab_rows = h.vocab_size;
    }
    if (!hf::is_file(dir + "/tokenizer.json")) {
      error = "tokenizer.json not found in '" + dir + "'";
      return std::nullopt;
    }
    SourceTokenizer tok;
    hf::json tcfg;
    if (!hf::read_tokenizer_files(dir, ids, vocab_rows, tok, tcfg, error)) return std::nullopt;
    return tok;
  } catch (const std::exception& e) {
    error = "Hugging Face tokenizer in '" + dir + "': " + e.what();
    return std::nullopt;
  }
}

}  // namespace keel::convert
