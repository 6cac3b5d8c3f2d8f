# Thin wrapper over CMake/Ninja for the README's commands.
.PHONY: all deps build test bench kernel-bench kernel-test clean
all: build
deps:
	bash scripts/deps.sh
build: deps
	cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build build/release
test:
	bash scripts/test.sh
bench:
	bash bench/run.sh
# libnbbs inside Linux (docs/kernel.md): boot test, and the in-kernel
# benchmark against alloc_pages (bench/results/kernel.json and kernel.md).
kernel-test:
	bash scripts/test.d/60-kernel.sh
kernel-bench:
	bash scripts/kernel/bench.sh
clean:
	rm -rf build
