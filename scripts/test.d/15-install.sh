#!/usr/bin/env bash
# The install target works for a consumer: install into a temporary prefix,
# then build a small program against it twice, through pkg-config and through
# CMake's find_package, with both the static and the shared library.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S . -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNBBS_BUILD_TESTS=OFF \
  -DNBBS_BUILD_BENCH=OFF -DNBBS_BUILD_NBMALLOC=OFF -DCMAKE_INSTALL_PREFIX="$tmp/prefix" >/dev/null
cmake --build "$tmp/build" >/dev/null
cmake --install "$tmp/build" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/ | head -1)

mkdir -p "$tmp/consumer"
cat > "$tmp/consumer/main.c" <<'C'
#include <nbbs.h>
#include <stdio.h>
int main(void)
{
    nbbs_config_t c = { 4096, 4, NBBS_LAYOUT_TREE };
    nbbs_t *b = nbbs_create((void *)(unsigned long)0x10000000, 4096 * 64, &c);
    void *p = b ? nbbs_alloc(b, 5000) : NULL;
    int ok = p && nbbs_block_size(b, p) == 8192 && nbbs_free(b, p) == 0;
    nbbs_destroy(b);
    puts(ok ? "consumer ok" : "consumer FAILED");
    return !ok;
}
C
passed=0
# pkg-config, static and shared
export PKG_CONFIG_PATH="$libdir/pkgconfig"
gcc -std=c11 "$tmp/consumer/main.c" $(pkg-config --cflags nbbs) "$libdir/libnbbs.a" -o "$tmp/c-static"
"$tmp/c-static" && passed=$((passed + 1))
gcc -std=c11 "$tmp/consumer/main.c" $(pkg-config --cflags --libs nbbs) -Wl,-rpath,"$libdir" -o "$tmp/c-shared"
"$tmp/c-shared" && passed=$((passed + 1))
# find_package
cat > "$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(nbbs 0.1 REQUIRED)
add_executable(c-cmake main.c)
target_link_libraries(c-cmake PRIVATE nbbs::nbbs)
CM
cmake -S "$tmp/consumer" -B "$tmp/consumer/build" -G Ninja -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/consumer/build" >/dev/null
"$tmp/consumer/build/c-cmake" && passed=$((passed + 1))
echo "install: $passed passed, $((3 - passed)) failed"
[ "$passed" -eq 3 ]
