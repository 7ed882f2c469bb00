# The two commands: `make demo` (set up, build, run a local network and a
# sample job) and `make test` (set up, build, run every test).
BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
FUZZ_TARGETS = job_spec agent_message client_requests

.PHONY: all setup configure build demo test unit integration bench fuzz clean format

all: build

setup:
	@./scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/claw demo

# Every unit and integration test, then each fuzzer for a short while.
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$${FUZZ_SECONDS_IN_TEST:-20}

unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L unit

integration: build
	cd $(BUILD) && ctest --output-on-failure -L integration

# libFuzzer (clang, ASan + UBSan) on each target for FUZZ_SECONDS, from the
# seeds in fuzz/corpus/; a crash stops it and leaves $(FUZZ_BUILD)/crash-*.
fuzz: setup
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCLAW_FUZZ=ON -DCLAW_WITH_TORCH=OFF \
	  -DCLAW_BUILD_TESTS=OFF -DCLAW_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) $(addprefix --target fuzz_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t && cp fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus/$$t/ && \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s" && \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=60 -rss_limit_mb=4096 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crash-$$t- $(FUZZ_BUILD)/corpus/$$t \
	    2>$(FUZZ_BUILD)/fuzz-$$t.log || { tail -40 $(FUZZ_BUILD)/fuzz-$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $(FUZZ_BUILD)/fuzz-$$t.log; \
	done

bench: build
	$(BUILD)/bench/network_bench all

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD)
