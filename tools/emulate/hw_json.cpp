#include "emulate/hw_json.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace keel::hw {
namespace {

using nlohmann::json;

struct Reader {
  std::string origin;
  std::string error;

  bool fail(const std::string& field, const std::string& expected, const json* found) {
    if (error.empty()) {
      error = origin + ": " + field + ": expected " + expected + ", found " + (found ? found->dump() : "nothing");
    }
    return false;
  }
  bool object(const json& j, const std::string& field, const std::vector<std::string>& keys) {
    if (!j.is_object()) return fail(field.empty() ? "the document" : field, "an object", &j);
    for (auto it = j.begin(); it != j.end(); ++it) {
      bool known = false;
      for (const std::string& k : keys) known = known || k == it.key();
      if (!known) {
        const std::string at = field.empty() ? it.key() : field + "." + it.key();
        error = origin + ": " + at + ": unknown field";
        return false;
      }
    }
    return true;
  }
  const json* member(const json& j, const std::string& field, const char* key) {
    auto it = j.find(key);
    if (it == j.end()) {
      fail(field.empty() ? key : field + "." + key, "a value", nullptr);
      return nullptr;
    }
    return &*it;
  }
  bool positive(const json& j, const std::string& field, const char* key, double& out) {
    const std::string at = field.empty() ? key : field + "." + key;
    const json* v = member(j, field, key);
    if (!v) return false;
    if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>()))
      return fail(at, "a positive number", v);
    out = v->get<double>();
    return true;
  }
  bool count(const json& j, const std::string& field, const char* key, uint64_t& out) {
    const std::string at = field.empty() ? key : field + "." + key;
    const json* v = member(j, field, key);
    if (!v) return false;
    double d = 0;
    if (!v->is_number() || !((d = v->get<double>()) >= 1) || d > 1.8e19 || std::floor(d) != d)
      return fail(at, "a whole number >= 1", v);
    out = uint64_t(d);
    return true;
  }
  bool name(const json& j, const std::string& field, const char* key, char (&out)[kHwNameBytes]) {
    const std::string at = field.empty() ? key : field + "." + key;
    const json* v = member(j, field, key);
    if (!v) return false;
    if (!v->is_string() || v->get<std::string>().empty() || v->get<std::string>().size() >= kHwNameBytes)
      return fail(at, "a name of 1.." + std::to_string(kHwNameBytes - 1) + " characters", v);
    const std::string s = v->get<std::string>();
    memcpy(out, s.c_str(), s.size() + 1);
    return true;
  }
};

}  // namespace

bool parse_hw_json(const std::string& text, const std::string& origin, HwDesc& out, std::string& error) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) {
    error = origin + ": not valid JSON";
    return false;
  }
  Reader r{origin, ""};
  HwDesc h;
  uint64_t dma = 0;
  bool ok = r.object(j, "",
                     {"name", "clock_hz", "compute", "sram", "offchip", "dma_engines", "serial", "cache",
                      "call_overhead_ns", "sources"}) &&
            r.name(j, "", "name", h.name) && r.positive(j, "", "clock_hz", h.clock_hz);
  const json* compute = ok ? r.member(j, "", "compute") : nullptr;
  ok = ok && compute &&
       r.object(*compute, "compute", {"macs_per_cycle", "vector_elems_per_cycle", "weight_elems_per_cycle"});
  if (ok && compute->contains("weight_elems_per_cycle"))
    ok = r.positive(*compute, "compute", "weight_elems_per_cycle", h.weight_elems_per_cycle);
  const json* macs = ok ? r.member(*compute, "compute", "macs_per_cycle") : nullptr;
  ok = ok && macs && r.object(*macs, "compute.macs_per_cycle", {"int8", "bf16", "f32"}) &&
       r.positive(*macs, "compute.macs_per_cycle", "int8", h.macs_per_cycle_int8) &&
       r.positive(*macs, "compute.macs_per_cycle", "bf16", h.macs_per_cycle_bf16) &&
       r.positive(*macs, "compute.macs_per_cycle", "f32", h.macs_per_cycle_f32) &&
       r.positive(*compute, "compute", "vector_elems_per_cycle", h.vector_elems_per_cycle);
  const json* sram = ok ? r.member(j, "", "sram") : nullptr;
  ok = ok && sram && r.object(*sram, "sram", {"bytes", "bytes_per_cycle"}) &&
       r.count(*sram, "sram", "bytes", h.sram_bytes) &&
       r.positive(*sram, "sram", "bytes_per_cycle", h.sram_bytes_per_cycle);
  const json* tiers = ok ? r.member(j, "", "offchip") : nullptr;
  if (ok && tiers && (!tiers->is_array() || tiers->empty() || tiers->size() > kHwMaxTiers)) {
    ok = r.fail("offchip", "an array of 1 or 2 tiers", tiers);
  }
  ok = ok && tiers;
  for (size_t i = 0; ok && i < tiers->size(); ++i) {
    const std::string at = "offchip[" + std::to_string(i) + "]";
    const json& t = (*tiers)[i];
    HwTier& d = h.tiers[i];
    ok = r.object(t, at, {"name", "capacity_bytes", "bandwidth_bytes_per_s", "latency_ns"}) &&
         r.name(t, at, "name", d.name) && r.count(t, at, "capacity_bytes", d.capacity_bytes) &&
         r.positive(t, at, "bandwidth_bytes_per_s", d.bandwidth_bytes_per_s);
    if (ok) {
      const json* lat = r.member(t, at, "latency_ns");
      ok = lat &&
           (lat->is_number() && lat->get<double>() >= 0 ? true : r.fail(at + ".latency_ns", "a number >= 0", lat));
      if (ok) d.latency_ns = lat->get<double>();
    }
    h.tier_count = uint32_t(i + 1);
  }
  ok = ok && r.count(j, "", "dma_engines", dma);
  if (ok && dma > 1024) ok = r.fail("dma_engines", "at most 1024", &j["dma_engines"]);
  if (ok && j.contains("serial") && !j["serial"].is_boolean()) ok = r.fail("serial", "true or false", &j["serial"]);
  if (ok && j.contains("sources") && !j["sources"].is_string()) ok = r.fail("sources", "a string", &j["sources"]);
  if (ok && j.contains("cache")) {
    const json& c = j["cache"];
    ok = r.object(c, "cache", {"bytes", "bandwidth_bytes_per_s", "share_curve"}) &&
         r.count(c, "cache", "bytes", h.cache_bytes) &&
         r.positive(c, "cache", "bandwidth_bytes_per_s", h.cache_bandwidth_bytes_per_s);
    if (ok && c.contains("share_curve")) {
      const json& rc = c["share_curve"];
      if (!rc.is_array() || rc.size() < 2 || rc.size() > kHwCurvePoints)
        ok = r.fail("cache.share_curve", "an array of 2.." + std::to_string(kHwCurvePoints) + " points", &rc);
      for (size_t i = 0; ok && i < rc.size(); ++i) {
        const std::string at = "cache.share_curve[" + std::to_string(i) + "]";
        ok = r.object(rc[i], at, {"bytes", "share"}) && r.count(rc[i], at, "bytes", h.cache_share_bytes[i]);
        if (ok && i > 0 && h.cache_share_bytes[i] <= h.cache_share_bytes[i - 1])
          ok = r.fail(at + ".bytes", "more than the previous point's " + std::to_string(h.cache_share_bytes[i - 1]),
                      &rc[i]["bytes"]);
        const json* f = ok ? r.member(rc[i], at, "share") : nullptr;
        if (ok && !(f && f->is_number() && f->get<double>() >= 0 && f->get<double>() <= 1))
          ok = r.fail(at + ".share", "a number from 0 to 1", f);
        if (ok) h.cache_share[i] = f->get<double>();
        h.cache_share_points = uint32_t(i + 1);
      }
    }
  }
  if (ok && j.contains("call_overhead_ns")) {
    const json& o = j["call_overhead_ns"];
    if (!o.is_number() || !(o.get<double>() >= 0) || !std::isfinite(o.get<double>()))
      ok = r.fail("call_overhead_ns", "a number >= 0", &o);
    else
      h.call_overhead_ns = o.get<double>();
  }
  if (!ok) {
    error = r.error;
    return false;
  }
  h.dma_engines = uint32_t(dma);
  h.serial = j.contains("serial") && j["serial"].get<bool>();
  out = h;
  return true;
}

std::string hw_to_json(const HwDesc& h, const std::string& sources) {
  json j;
  j["name"] = h.name;
  j["clock_hz"] = h.clock_hz;
  j["compute"] = {{"macs_per_cycle",
                   {{"int8", h.macs_per_cycle_int8}, {"bf16", h.macs_per_cycle_bf16}, {"f32", h.macs_per_cycle_f32}}},
                  {"vector_elems_per_cycle", h.vector_elems_per_cycle}};
  if (h.weight_elems_per_cycle > 0) j["compute"]["weight_elems_per_cycle"] = h.weight_elems_per_cycle;
  j["sram"] = {{"bytes", h.sram_bytes}, {"bytes_per_cycle", h.sram_bytes_per_cycle}};
  j["offchip"] = json::array();
  for (uint32_t i = 0; i < h.tier_count; ++i) {
    j["offchip"].push_back({{"name", h.tiers[i].name},
                            {"capacity_bytes", h.tiers[i].capacity_bytes},
                            {"bandwidth_bytes_per_s", h.tiers[i].bandwidth_bytes_per_s},
                            {"latency_ns", h.tiers[i].latency_ns}});
  }
  j["dma_engines"] = h.dma_engines;
  j["serial"] = h.serial;
  if (h.cache_bytes > 0) {
    j["cache"] = {{"bytes", h.cache_bytes}, {"bandwidth_bytes_per_s", h.cache_bandwidth_bytes_per_s}};
    if (h.cache_share_points > 0) {
      json rc = json::array();
      for (uint32_t i = 0; i < h.cache_share_points && i < kHwCurvePoints; ++i)
        rc.push_back({{"bytes", h.cache_share_bytes[i]}, {"share", h.cache_share[i]}});
      j["cache"]["share_curve"] = rc;
    }
  }
  if (h.call_overhead_ns > 0) j["call_overhead_ns"] = h.call_overhead_ns;
  j["sources"] = sources;
  return j.dump(2) + "\n";
}

std::string host_hw_path() {
  const char* cache = getenv("KEEL_CACHE_DIR");
  if (cache && *cache) return std::string(cache) + "/hw/host.json";
  const char* home = getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/keel/hw/host.json";
}

bool load_hw(const std::string& name_or_path, HwDesc& out, std::string& error) {
  for (const Preset& p : presets()) {
    if (name_or_path == p.name) return parse_hw_json(p.json, std::string("preset ") + p.name, out, error);
  }
  std::string path = name_or_path;
  if (name_or_path == "host") path = host_hw_path();
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = name_or_path == "host"
                ? "no host description at " + path + " (run keel emulate --calibrate first)"
                : "--hw '" + name_or_path + "': neither a preset (keel emulate --list-hw) nor a readable file";
    return false;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_hw_json(ss.str(), path, out, error);
}

}  // namespace keel::hw
