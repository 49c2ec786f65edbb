// Runs the fuzz target over every file of the given directories (the seed corpus and any
// crash reproducers), so the normal test build exercises it without libFuzzer.
#include <dirent.h>

#include <cstdio>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static bool read_file(const std::string& path, std::vector<uint8_t>& out) {
  FILE* f = fopen(path.c_str(), "rb");
  if (!f) return false;
  out.clear();
  uint8_t buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  fclose(f);
  return true;
}

int main(int argc, char** argv) {
  size_t count = 0;
  std::vector<uint8_t> bytes;
  for (int i = 1; i < argc; ++i) {
    DIR* d = opendir(argv[i]);
    if (!d) {
      fprintf(stderr, "replay: cannot open directory %s\n", argv[i]);
      return 1;
    }
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const std::string path = std::string(argv[i]) + "/" + e->d_name;
      if (!read_file(path, bytes)) continue;
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++count;
    }
    closedir(d);
  }
  printf("replayed %zu inputs\n", count);
  if (count == 0) {
    fprintf(stderr, "replay: no inputs found; the corpus must not be empty\n");
    return 1;
  }
  return 0;
}
