# Thin wrapper over CMake/Ninja for the README's commands.
.PHONY: all deps build test bench clean
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
clean:
	rm -rf build
