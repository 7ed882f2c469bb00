# The two commands: `make demo` (set up, build, run a local network and a
# sample job) and `make test` (set up, build, run every test).
BUILD ?= build
JOBS ?= 2
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=

FUZZ_SECONDS ?= 60
FUZZ_BUILD ?= build-fuzz
FUZZ_TARGETS = job_spec agent_message client_requests safetensors npy npz tokens signed_note
SAN_BUILD ?= build-sanitize
SAN_REPORTS = $(abspath $(SAN_BUILD))/reports

.PHONY: all setup configure build demo test unit integration bench bench-fedtrain bench-fedtrain-faults bench-slowlink bench-models bench-lm bench-secagg bench-dp fuzz sanitize clean format

all: build

setup:
	@./scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	$(BUILD)/claw demo

# Every unit, integration and docs test; each fuzzer for a short while; then
# the unit and integration tests again under AddressSanitizer and UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$${FUZZ_SECONDS_IN_TEST:-20}
	@$(MAKE) --no-print-directory sanitize

unit: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) -L unit

integration: build
	cd $(BUILD) && ctest --output-on-failure -L integration

# libFuzzer (clang, ASan + UBSan) on each target for FUZZ_SECONDS, from the
# seeds in fuzz/corpus/; a crash stops it and leaves $(FUZZ_BUILD)/crash-*.
# With the same clang configuration, every source under src/ is compiled
# (syntax only) with -Werror=thread-safety: a member read without the mutex
# that guards it fails here.
fuzz: setup
	@cmake -S . -B $(FUZZ_BUILD) -DCMAKE_CXX_COMPILER=clang++ -DCLAW_FUZZ=ON -DCLAW_WITH_TORCH=OFF \
	  -DCLAW_BUILD_TESTS=OFF -DCLAW_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(FUZZ_BUILD) -j$(JOBS) $(addprefix --target fuzz_,$(FUZZ_TARGETS))
	@JOBS=$(JOBS) ./scripts/thread-safety-check.sh $(FUZZ_BUILD)
	@for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$t && cp fuzz/corpus/$$t/* $(FUZZ_BUILD)/corpus/$$t/ && \
	  echo "fuzz: $$t for $(FUZZ_SECONDS) s" && \
	  $(FUZZ_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=60 -rss_limit_mb=4096 \
	    -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crash-$$t- $(FUZZ_BUILD)/corpus/$$t \
	    2>$(FUZZ_BUILD)/fuzz-$$t.log || { tail -40 $(FUZZ_BUILD)/fuzz-$$t.log; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $(FUZZ_BUILD)/fuzz-$$t.log; \
	done

# The unit and integration tests built with AddressSanitizer and
# UndefinedBehaviorSanitizer (GCC). Every process they start (coordinators,
# agents, workers) writes any report to $(SAN_REPORTS)/, and one report
# fails the run, even where the test itself passed (a worker that dies is
# retried elsewhere). Leak checking is off: gRPC and protobuf keep some
# allocations until exit by design. -O1 -g1 (line tables): 2.4x faster to
# compile than -O2 -g under the sanitizers, and the reports keep file:line.
sanitize: setup
	@cmake -S . -B $(SAN_BUILD) -DCLAW_SANITIZE=address,undefined -DCLAW_BUILD_BENCH=OFF \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" >/dev/null
	@cmake --build $(SAN_BUILD) -j$(JOBS)
	@rm -rf $(SAN_REPORTS) && mkdir -p $(SAN_REPORTS)
	cd $(SAN_BUILD) && \
	  ASAN_OPTIONS=detect_leaks=0:log_path=$(SAN_REPORTS)/asan \
	  UBSAN_OPTIONS=print_stacktrace=1:log_path=$(SAN_REPORTS)/ubsan \
	  ctest --output-on-failure -j$(JOBS) --timeout 900 -L 'unit|integration' -LE docs
	@if [ -n "$$(ls -A $(SAN_REPORTS))" ]; then \
	  for f in $(SAN_REPORTS)/*; do echo "== $$f"; head -60 $$f; done; \
	  echo "sanitize: the reports above came from processes the tests started"; exit 1; \
	else echo "sanitize: no AddressSanitizer or UBSan report"; fi

bench: build
	$(BUILD)/bench/network_bench all

# Training one model on 2 agents in rounds against PyTorch DDP and a single
# process (~6 min; docs/benchmarks.md).
bench-fedtrain: build
	/usr/bin/python3 bench/fedtrain_bench.py --claw $(BUILD)/claw

# Training in rounds with 2 liars among 10 agents, and with dropouts and a
# slow device among 8 (~12 min; docs/benchmarks.md).
bench-fedtrain-faults: build
	/usr/bin/python3 bench/fedtrain_faults.py --claw $(BUILD)/claw

# Training in rounds and PyTorch DDP over a 20 Mbit/s, 50 ms link between
# network namespaces, each against loopback (root; ~6 min; docs/benchmarks.md).
bench-slowlink: build
	/usr/bin/python3 bench/slowlink.py --claw $(BUILD)/claw

# Users' TorchScript modules against PyTorch, end to end, and LoRA against
# full fine-tuning (~3 min; docs/benchmarks.md).
bench-models: build
	/usr/bin/python3 bench/models_bench.py --claw $(BUILD)/claw

bench-lm: build
	/usr/bin/python3 bench/lm_bench.py --claw $(BUILD)/claw

# Secure aggregation's cost: round time and bytes per device with and
# without it, 4 to 32 agents on loopback (~5 min; docs/benchmarks.md).
bench-secagg: build
	/usr/bin/python3 bench/secagg_bench.py --claw $(BUILD)/claw

# Accuracy against ε for DP-FedAvg, a simulated population of devices in one
# process (long: ~2 min per row; docs/benchmarks.md).
bench-dp: build
	/usr/bin/python3 bench/dp_accuracy_bench.py --claw $(BUILD)/claw

format:
	clang-format -i $$(git ls-files '*.h' '*.cc')

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(SAN_BUILD)
