# The two commands: `make demo` (set up, build, run a local network and a
# sample job) and `make test` (set up, build, run every test).
BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=

.PHONY: all setup configure build demo test unit integration bench clean format

all: build

setup:
	@./scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/claw demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L unit

integration: build
	cd $(BUILD) && ctest --output-on-failure -L integration

bench: build
	$(BUILD)/bench/network_bench all

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD)
