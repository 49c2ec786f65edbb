#include "keel/cli/cli_util.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>

#include "backend/registry.h"
#include "kv/kv_policy.h"

namespace keel::cli {

int usage_error(const char* cmd, const std::string& message) {
  fprintf(stderr, "keel %s: %s (see 'keel %s --help')\n", cmd, message.c_str(), cmd);
  return 2;
}

int fail(const char* cmd, const std::string& message) {
  fprintf(stderr, "keel %s: %s\n", cmd, message.c_str());
  return 1;
}

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30))
    snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20))
    snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else if (n >= (1ull << 10))
    snprintf(buf, sizeof buf, "%.1f KiB", n / double(1ull << 10));
  else
    snprintf(buf, sizeof buf, "%llu B", (unsigned long long)n);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\r': o += "\\r"; break;
      case '\t': o += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof buf, "\\u%04x", c);
          o += buf;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string namespace_from_path(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const size_t dot = base.find('.');
  if (dot != std::string::npos) base = base.substr(0, dot);
  std::string ns;
  for (char c : base) ns += (isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (ns.empty() || isdigit(static_cast<unsigned char>(ns[0]))) ns = "model_" + ns;
  return ns;
}

bool split_list(const std::string& s, std::vector<std::string>& out) {
  size_t begin = 0;
  while (true) {
    const size_t end = s.find(',', begin);
    const std::string item = s.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    if (item.empty()) return false;
    out.push_back(item);
    if (end == std::string::npos) return true;
    begin = end + 1;
  }
}

// A file's default policy is the engine's policy of the same name; the schema's enum is the
// engine's first five kinds (rocketkv is chosen at run time only).
static_assert(unsigned(fb::KvPolicy::MAX) == unsigned(KvPolicyKind::SnapStream) &&
              unsigned(fb::KvPolicy::SnapKV) == unsigned(KvPolicyKind::SnapKV));

bool parse_kv_policy(const std::string& s, fb::KvPolicy& out) {
  KvPolicyKind k;
  if (!parse_kv_policy(s.c_str(), k) || unsigned(k) > unsigned(fb::KvPolicy::MAX)) return false;
  out = fb::KvPolicy(k);
  return true;
}

const char* kv_policy_name(fb::KvPolicy p) { return kv_policy_name(KvPolicyKind(p)); }

namespace {

std::string join_names(const std::vector<const char*>& names, NameList style) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += style == NameList::Help ? " | " : i + 1 == names.size() ? " or " : ", ";
    s += names[i];
  }
  return s;
}

}  // namespace

std::string kv_policy_choices(bool with_rocketkv, NameList style) {
  std::vector<const char*> names;
  for (KvPolicyKind k : kKvPolicies) {
    if (with_rocketkv || unsigned(k) <= unsigned(fb::KvPolicy::MAX)) names.push_back(kv_policy_name(k));
  }
  return join_names(names, style);
}

std::string backend_choices(NameList style) {
  std::vector<const char*> names;
  for (const BackendInfo& b : backend_infos()) names.push_back(b.name);
  return join_names(names, style);
}

void ProgressBar::update(size_t done, size_t total, uint64_t bytes) {
  if (!enabled_ || total == 0) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / total);
  fprintf(stderr, "\r[%.*s%*s] %zu/%zu tensors, %s   ", filled, "==============================", kWidth - filled, "",
          done, total, human_bytes(bytes).c_str());
  fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) fprintf(stderr, "\n");
  drawn_ = false;
}

}  // namespace keel::cli
