# Writes the byte count of the converted model as a header, so that the firmware knows how much
# of the loader's region is the file (the engine refuses bytes after its checksum trailer):
#   cmake -DMODEL=smollm2.keel -DOUT=model_size.h -P model_size.cmake
file(SIZE "${MODEL}" _size)
file(WRITE "${OUT}.tmp" "// Generated from ${MODEL} at build time. Do not edit.\n#pragma once\n\n"
                        "#include <cstddef>\n\ninline constexpr size_t kModelBytes = ${_size};\n")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
