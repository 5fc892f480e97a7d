# Thin wrapper: the real work is in scripts/ and CMake.
.PHONY: all demo test gpu-check clean
all:
	scripts/install-deps
	cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
	cmake --build build -j$$(nproc)
demo:
	scripts/demo
test:
	scripts/test
gpu-check:
	scripts/gpu-check
clean:
	rm -rf build build-asan build-fuzz build-gpu
