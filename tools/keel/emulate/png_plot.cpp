#include "keel/emulate/png_plot.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <vector>

#include "keel/cli/cli_util.h"

namespace keel::cli {
namespace {

uint32_t crc32(const uint8_t* p, size_t n, uint32_t c = 0xffffffffu) {
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  return c;
}

void put32(std::vector<uint8_t>& o, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) o.push_back(uint8_t(v >> s));
}

void chunk(std::vector<uint8_t>& o, const char* type, const std::vector<uint8_t>& data) {
  put32(o, uint32_t(data.size()));
  std::vector<uint8_t> body(type, type + 4);
  body.insert(body.end(), data.begin(), data.end());
  o.insert(o.end(), body.begin(), body.end());
  put32(o, crc32(body.data(), body.size()) ^ 0xffffffffu);
}

// RGB rows -> PNG with an uncompressed (stored) zlib stream.
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& rgb, uint32_t w, uint32_t h) {
  std::vector<uint8_t> raw;
  for (uint32_t y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + uint64_t(y) * w * 3, rgb.begin() + uint64_t(y + 1) * w * 3);
  }
  std::vector<uint8_t> z = {0x78, 0x01};
  for (size_t at = 0; at < raw.size() || at == 0;) {
    const size_t n = raw.size() - at < 65535 ? raw.size() - at : 65535;
    z.push_back(at + n == raw.size() ? 1 : 0);
    z.push_back(uint8_t(n));
    z.push_back(uint8_t(n >> 8));
    z.push_back(uint8_t(~n));
    z.push_back(uint8_t(~n >> 8));
    z.insert(z.end(), raw.begin() + at, raw.begin() + at + n);
    at += n;
    if (n == 0) break;
  }
  uint32_t a = 1, b = 0;
  for (uint8_t v : raw) a = (a + v) % 65521, b = (b + a) % 65521;
  put32(z, (b << 16) | a);
  std::vector<uint8_t> o = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a};
  std::vector<uint8_t> ihdr;
  put32(ihdr, w);
  put32(ihdr, h);
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});
  chunk(o, "IHDR", ihdr);
  chunk(o, "IDAT", z);
  chunk(o, "IEND", {});
  return o;
}

struct Canvas {
  uint32_t w, h;
  std::vector<uint8_t> px;
  Canvas(uint32_t w_, uint32_t h_) : w(w_), h(h_), px(uint64_t(w_) * h_ * 3, 255) {}
  void dot(int x, int y, const uint8_t c[3]) {
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) {
        const int X = x + dx, Y = y + dy;
        if (X < 0 || Y < 0 || X >= int(w) || Y >= int(h)) continue;
        uint8_t* p = &px[(uint64_t(Y) * w + X) * 3];
        p[0] = c[0], p[1] = c[1], p[2] = c[2];
      }
  }
  void line(int x0, int y0, int x1, int y1, const uint8_t c[3]) {
    const int steps = std::max(std::abs(x1 - x0), std::abs(y1 - y0)) + 1;
    for (int i = 0; i <= steps; ++i) dot(x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps, c);
  }
};

}  // namespace

bool plot_kv_onchip(const EmuConfig& c, const std::string& path, std::string& error) {
  const uint32_t max_ctx = c.context > 8192 ? c.context : 131072;
  std::vector<uint32_t> ctx;
  for (uint32_t x = 1024; x <= max_ctx; x *= 2) ctx.push_back(x);
  if (ctx.size() < 2) ctx = {1024, 2048};
  // The bytes the schedule places for every slot's cache at each context (local rings and page
  // summaries included): under full the context, under the bounded policy its budget.
  auto kv_bytes = [&](uint32_t context, bool bounded) {
    EmuConfig at = c;
    at.context = context;
    at.bounded = bounded;
    if (!bounded) at.sparse = SparseSplit{};
    return double(emu_schedule(at).kv_total_bytes);
  };
  const double ymax = std::max(kv_bytes(ctx.back(), false), double(c.hw.sram_bytes)) * 1.05;
  const uint32_t W = 800, H = 500, L = 60, R = 20, T = 20, B = 40;
  Canvas cv(W, H);
  const uint8_t black[3] = {0, 0, 0}, red[3] = {220, 30, 30}, blue[3] = {30, 60, 220}, gray[3] = {140, 140, 140};
  auto X = [&](size_t i) { return int(L + (W - L - R) * i / (ctx.size() - 1)); };
  auto Y = [&](double v) { return int(H - B - (H - B - T) * (v / ymax)); };
  cv.line(L, H - B, W - R, H - B, black);
  cv.line(L, H - B, L, T, black);
  cv.line(L, Y(double(c.hw.sram_bytes)), W - R, Y(double(c.hw.sram_bytes)), gray);
  for (size_t i = 0; i + 1 < ctx.size(); ++i) {
    cv.line(X(i), Y(kv_bytes(ctx[i], false)), X(i + 1), Y(kv_bytes(ctx[i + 1], false)), red);
    cv.line(X(i), Y(kv_bytes(ctx[i], true)), X(i + 1), Y(kv_bytes(ctx[i + 1], true)), blue);
  }
  const std::vector<uint8_t> png = encode_png(cv.px, W, H);
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size()));
  if (!f) {
    error = "cannot write " + path;
    return false;
  }
  fprintf(stderr,
          "plot %s: x = context %u..%u tokens (log2 steps), y = KV bytes for %u slot(s), 0..%s; red full, blue "
          "bounded at budget %u, gray SRAM %s\n",
          path.c_str(), ctx.front(), ctx.back(), c.slots, human_bytes(uint64_t(ymax)).c_str(), c.budget,
          human_bytes(c.hw.sram_bytes).c_str());
  return true;
}

}  // namespace keel::cli
