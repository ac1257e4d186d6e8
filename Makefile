# seer: build, test, install. `make help` lists the targets.
# The dependency list lives in tools/debian-packages.txt; `make setup` installs it.

PREFIX   ?= /usr/local
BUILD    ?= build
WERROR   ?= 1
SANITIZE ?=
CC       ?= cc

PKGS      := luajit libcjson libpcre2-8 libzmq libcrypto libmicrohttpd libpng libcurl
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# libcurl: headers only; engine/hub/curl_dl.c loads it with dlopen when first used.
PKG_LIBS   := $(shell pkg-config --libs $(filter-out libcurl,$(PKGS)) 2>/dev/null)

CFLAGS   ?= -O2 -g
WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes $(if $(filter 1,$(WERROR)),-Werror)
comma    := ,
SANFLAGS  := $(if $(SANITIZE),-fsanitize=address$(comma)undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(SANFLAGS) -MMD -MP -Iengine -I$(BUILD) $(PKG_CFLAGS)
# -rdynamic: LuaJIT's ffi.C must see the functions the seer binary exports.
ALL_LDFLAGS := -rdynamic $(SANFLAGS) $(LDFLAGS)
LIBS      := $(PKG_LIBS) -lreadline -lm -ldl -lpthread

ENGINE_SRC := $(filter-out engine/main.c,$(shell find engine -name '*.c' | sort))
ENGINE_OBJ := $(ENGINE_SRC:%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/cuda_fatbin.o
MAIN_OBJ   := $(BUILD)/obj/engine/main.o
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN   := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)

SEER_BIN := $(if $(filter build,$(BUILD)),seer,$(BUILD)/seer)

VERSION := $(shell cat VERSION)
GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)

.PHONY: test-remote all setup test unit attack asan soak bench bench-kernel bench-kernel-ab bench-attention bench-multi bench-gpu bench-setup parity fuzz fuzz-syntax fuzz-kernel fuzz-batch install uninstall demo clean help check-deps
all: $(SEER_BIN)

help:
	@echo "make            build ./seer"
	@echo "make setup      install missing build and test dependencies (Debian packages)"
	@echo "make test-remote  the remote backends' tests alone (a real sshd, a one-node Slurm on loopback, podman, a stand-in Kubernetes API server; docs/backends.md)"
	@echo "make demo       setup + build + run experiments/hello and the offline introspection investigation"
	@echo "make test       build and run the whole test suite (ends with 'N passed, N failed')"
	@echo "make attack    the attack suite alone (docs/security.md)"
	@echo "make asan       the same suite under AddressSanitizer + UBSan (build/asan)"
	@echo "make bench      seer against peers (luajit, python3, transformers) measured in the same run"
	@echo "make bench-kernel  the per-token linear kernels alone on the 0.5B shapes (GFLOP/s, one thread; SHAPES=, COLD=1)"
	@echo "make bench-kernel-ab  the linear kernel at a revision (A_REF, default HEAD) against the working tree's, paired calls"
	@echo "make bench-attention  a batch's decode attention: a call per sequence against one loop over all (ARGS=\"SEQS CONTEXT THREADS [LAYERS]\")"
	@echo "make bench-multi  q, k, v, gate, up one call each against one pass (fast bf16; ARGS=\"TOKENS THREADS\")"
	@echo "make bench-gpu  the CUDA backend on Gemma-2-2B/9B shapes against the GPU's bandwidth and peak, and transformers"
	@echo "make bench-setup  the transformers peer for make bench and make parity (pip, into .venv)"
	@echo "make parity     regenerate the transformers parity goldens live and compare"
	@echo "make fuzz       libFuzzer on the safetensors, tokenizer.json, chat-template and JSON parsers and on model loading from hostile config.json (FUZZ_SECONDS each)"
	@echo "make fuzz-syntax  the fuzz build's sources through clang, syntax only (make test runs it)"
	@echo "make soak       the notebook pipeline under load: 100,000 display messages, 1 GB of stdout in one cell (minutes)"
	@echo "make fuzz-kernel  FUZZ_KERNEL_N (100000) malformed messages from a hijacked sandboxed kernel; bystander checked"
	@echo "make fuzz-batch   FUZZ_BATCH_N (20000) random batteries: batched, cached and shared generation, forward, caches and extraction against each prompt alone; FUZZ_API_N (200000) calls with hostile arguments, FUZZ_TENSOR_N (100000) to the tensor API"
	@echo "make install    install into PREFIX (default /usr/local): bin/seer, share/seer/lua, share/doc/seer"
	@echo "make clean      remove build outputs"

check-deps:
	@pkg-config --exists $(PKGS) || { echo "missing build dependencies; run: make setup" >&2; exit 1; }

# The version header changes only when the version or revision does, so builds stay incremental.
$(BUILD)/version.h: FORCE
	@mkdir -p $(@D)
	@printf '#define SEER_VERSION "%s"\n#define SEER_GIT_REV "git %s"\n' '$(VERSION)' '$(GIT_REV)' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
FORCE:

$(BUILD)/obj/%.o: %.c | check-deps $(BUILD)/version.h
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/engine/seer.o: $(BUILD)/version.h

# The notebook live view (HTML + JS) is embedded in the binary as a C string; `?` is escaped
# because -std=c11 turns `??x` sequences into trigraphs.
$(BUILD)/gen/live_page.h: engine/net/live_page.html
	@mkdir -p $(@D)
	@{ echo '/* generated from engine/net/live_page.html by the Makefile */'; \
	   echo 'static const char seer_live_page_html[] ='; \
	   sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/?/\\?/g' -e 's/^/"/' -e 's/$$/\\n"/' $<; \
	   echo ';'; } > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/engine/net/http.o: $(BUILD)/gen/live_page.h

# CUDA kernels (kernels/*.cu): nvcc builds one fatbin per file (sm_80 and sm_90 machine code plus
# compute_90 PTX for later GPUs) into build/cuda, shared by every BUILD dir; tools/gen-fatbin-asm.sh
# embeds them in the binary. No GPU is needed to build. Without nvcc the table is empty and
# device = "cuda" explains that this binary has no kernels.
NVCC       ?= $(firstword $(shell command -v nvcc 2>/dev/null) $(wildcard /usr/local/cuda/bin/nvcc))
CUDA_SRC   := $(sort $(wildcard kernels/*.cu))
CUDA_HDR   := $(wildcard kernels/*.cuh)
CUDA_FATBIN := $(if $(NVCC),$(CUDA_SRC:kernels/%.cu=build/cuda/%.fatbin))
NVCC_FLAGS ?= -std=c++17 -O3 -Ikernels --no-compress -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90 $(if $(filter 1,$(WERROR)),--Werror all-warnings)
build/cuda/%.fatbin: kernels/%.cu $(CUDA_HDR)
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) -fatbin -o $@ $<
$(BUILD)/gen/cuda_fatbin.S: $(CUDA_FATBIN) tools/gen-fatbin-asm.sh
	@mkdir -p $(@D)
	@$(if $(NVCC),,echo "seer: nvcc not found; building without the CUDA kernels (install the CUDA toolkit for device = \"cuda\")" >&2;)
	@bash tools/gen-fatbin-asm.sh $@ $(CUDA_FATBIN)
$(BUILD)/obj/cuda_fatbin.o: $(BUILD)/gen/cuda_fatbin.S
	@mkdir -p $(@D)
	$(CC) -c $< -o $@

$(BUILD)/libseer.a: $(ENGINE_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(SEER_BIN): $(MAIN_OBJ) $(BUILD)/libseer.a
	$(CC) $(ALL_LDFLAGS) -o $@ $(MAIN_OBJ) -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libseer.a | check-deps
	@mkdir -p $(@D)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS) $(shell pkg-config --libs criterion)

# The mock NVIDIA driver for tests/unit/test_cuda.c (no GPU here; see the file's comment).
$(BUILD)/tests/libfakecuda.so: tests/unit/fake_libcuda.c
	@mkdir -p $(@D)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O1 -shared -fPIC -o $@ $<

unit: $(UNIT_BIN) $(BUILD)/tests/libfakecuda.so

setup:
	@bash tools/setup.sh
	@bash tools/setup-python.sh

test: $(SEER_BIN) $(UNIT_BIN) $(BUILD)/tests/libfakecuda.so
	@SEER=$(CURDIR)/$(SEER_BIN) SEER_BUILD=$(BUILD) UNIT_BINS="$(UNIT_BIN)" bash tests/run.sh

# The remote sandbox backends against real peers started by the tests (sshd, also in its own
# network namespace; slurmctld and slurmd on loopback; podman; a private dockerd; the
# Kubernetes stand-in API server): tests/lua/test_backend_*.lua; they are part of make test too,
# except the long ones (SEER_TEST_LONG=1: Slurm's own one-minute time limit firing).
test-remote: $(SEER_BIN)
	@SEER_TEST_LONG=1 ./$(SEER_BIN) tests/lua/run.lua $(wildcard tests/lua/test_backend_*.lua)

bench: $(SEER_BIN) $(BUILD)/bench/peak
	@SEER=$(CURDIR)/$(SEER_BIN) PEAK=$(CURDIR)/$(BUILD)/bench/peak bash tests/bench/run.sh

# The CUDA backend on random-weight Gemma-2-2B/9B shapes against the copy bandwidth and bf16 peak
# measured or known for the GPU, then transformers on the same shapes when torch is there
# (tests/bench/gpu_bench.c, gpu_transformers.py). Prints "skipped: no GPU" without one.
bench-gpu: $(BUILD)/bench/gpu_bench
	@$(BUILD)/bench/gpu_bench $(GPU_MODELS)
	@$(or $(PYTHON),python3) tests/bench/gpu_transformers.py $(GPU_MODELS)

# The per-token linear kernels alone on the 0.5B model's shapes (tests/bench/linear_kernel.c:
# GFLOP/s from one thread's CPU time; `make bench-kernel`, or build/bench/linear_kernel 1 4 16;
# SHAPES=ROWSxCOLS,... and COLD=1 as its header says).
bench-kernel: $(BUILD)/bench/linear_kernel
	@$(BUILD)/bench/linear_kernel

# The blocked kernel of a git revision against the working tree's, calls alternating in one
# program (tests/bench/kernel_ab.sh): A_REF=rev (default HEAD), A_DEFS/B_DEFS="-DNAME=value",
# TOKENS, REPS, THREADS, COLD=1, HUGE=1.
bench-kernel-ab: $(BUILD)/libseer.a
	@CC="$(CC)" CFLAGS_ALL="$(ALL_CFLAGS)" LIBS_ALL="$(ALL_LDFLAGS) -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS)" bash tests/bench/kernel_ab.sh

$(BUILD)/bench/linear_kernel: tests/bench/linear_kernel.c $(BUILD)/libseer.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS)

# One layer's decode attention for a batch, a call per sequence against seer_k_attention_batch
# (tests/bench/attention_batch.c; ARGS="SEQS CONTEXT THREADS" runs one, else 16 x 8, 128 and 512 on 2 threads).
bench-attention: $(BUILD)/bench/attention_batch
	@$(if $(ARGS),$(BUILD)/bench/attention_batch $(ARGS),for c in "16 8 2" "16 128 2" "16 512 2"; do $(BUILD)/bench/attention_batch $$c; done)

# q, k, v, gate and up one call each against seer_k_linear_multi, fast bf16 (tests/bench/linear_multi.c;
# ARGS="TOKENS THREADS" runs one, else 1, 4 and 16 tokens on 2 threads).
bench-multi: $(BUILD)/bench/linear_multi
	@$(if $(ARGS),$(BUILD)/bench/linear_multi $(ARGS),for c in "1 2" "4 2" "16 2"; do $(BUILD)/bench/linear_multi $$c; done)

$(BUILD)/bench/linear_multi: tests/bench/linear_multi.c $(BUILD)/libseer.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS)

$(BUILD)/bench/attention_batch: tests/bench/attention_batch.c $(BUILD)/libseer.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS)

$(BUILD)/bench/gpu_bench: tests/bench/gpu_bench.c $(BUILD)/libseer.a
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(ALL_LDFLAGS) -o $@ $< -Wl,--whole-archive $(BUILD)/libseer.a -Wl,--no-whole-archive $(LIBS)

# The compute-peak probe for the prefill bound (tests/bench/peak.c: FMA and AMX on registers).
$(BUILD)/bench/peak: tests/bench/peak.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -pthread $< -o $@

# Regenerates the parity models and goldens live with transformers (needs make bench-setup) and
# compares seer against them; make test uses the stored copies in tests/parity/models.
parity: $(SEER_BIN)
	@d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	  .venv/bin/python tests/parity/generate.py "$$d" | grep -E '^(ok|FAIL)' && \
	  .venv/bin/python tests/parity/hooks_goldens.py "$$d" | grep -E '^(ok|FAIL)' && \
	  .venv/bin/python tests/parity/tokenizer_goldens.py "$$d/tokenizers.json" && \
	  .venv/bin/python tests/parity/chat_goldens.py "$$d/chat_templates.json" && \
	  .venv/bin/python tests/parity/lora_goldens.py "$$d/lora" --models "$$d" 2>/dev/null | grep -E '^(ok|FAIL)' && \
	  SEER_PARITY_DIR="$$d" SEER_TOKENIZER_PARITY="$$d/tokenizers.json" SEER_CHAT_PARITY="$$d/chat_templates.json" \
	  SEER_LORA_DIR="$$d/lora" \
	    ./$(SEER_BIN) tests/lua/run.lua tests/lua/test_parity.lua tests/lua/test_tokenizer_parity.lua \
	    tests/lua/test_chat_template_parity.lua tests/lua/test_lora.lua tests/lua/test_hooks_parity.lua

# Coverage-guided fuzzing (libFuzzer, with ASan + UBSan) of the parsers that take outside input, and
# of model loading and a forward pass from a hostile config.json (fuzz_model_config): each target
# runs FUZZ_SECONDS (default 600) from a seed corpus; findings go to build/fuzz/.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=address,undefined -Iengine -Ibuild/fuzz -I$(BUILD) $(PKG_CFLAGS)
FUZZ_LIB_SRC := $(ENGINE_SRC)
build/fuzz/libseer.a: $(FUZZ_LIB_SRC) $(BUILD)/version.h $(BUILD)/gen/cuda_fatbin.S $(BUILD)/gen/live_page.h
	@mkdir -p build/fuzz/obj
	cp $(BUILD)/version.h build/fuzz/version.h
	for f in $(FUZZ_LIB_SRC); do clang $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $$f -o build/fuzz/obj/$$(echo $$f | tr / _).o || exit 1; done
	$(CC) -c $(BUILD)/gen/cuda_fatbin.S -o build/fuzz/obj/cuda_fatbin.o
	rm -f $@ && ar rcs $@ build/fuzz/obj/*.o
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c build/fuzz/libseer.a
	clang $(FUZZ_FLAGS) -fsanitize=fuzzer -o $@ $< build/fuzz/libseer.a $(LIBS)
fuzz: $(FUZZ_TARGETS)
	@bash tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)
# The fuzz build's sources through clang, syntax only (make fuzz compiles with clang, the rest of
# the build with gcc; tests/integration/test_build.py runs this, so make test sees a construct
# only gcc accepts): about 15 s.
fuzz-syntax: $(BUILD)/version.h $(BUILD)/gen/live_page.h
	@for f in $(FUZZ_LIB_SRC) $(wildcard tests/fuzz/fuzz_*.c); do clang $(FUZZ_FLAGS) -fsyntax-only $$f || exit 1; done

# Hostile messages on a sandboxed kernel's channels (tests/fuzz/kernel_fuzz.lua): the notebook
# server and a bystander session must stay up and right; make test runs a 3000-message version.
FUZZ_KERNEL_N ?= 100000
fuzz-kernel: $(SEER_BIN)
	@FUZZ_KERNEL_N=$(FUZZ_KERNEL_N) ./$(SEER_BIN) tests/lua/run.lua tests/lua/test_fuzz_kernel.lua

# Batched and cached generation against each prompt generated alone, differentially
# (tests/lua/test_fuzz_batch.lua): FUZZ_BATCH_N random batteries from a seed of the clock, printed
# (FUZZ_BATCH_SEED=S replays); make test runs 120 from a fixed seed. Then FUZZ_API_N calls with
# hostile arguments to the same API and FUZZ_TENSOR_N to the tensor API (tests/lua/test_fuzz_api.lua;
# make test runs 1500 and 3000).
FUZZ_BATCH_N ?= 20000
FUZZ_API_N ?= 200000
FUZZ_TENSOR_N ?= 100000
fuzz-batch: $(SEER_BIN)
	@seed=$${FUZZ_BATCH_SEED:-$$(date +%s)}; echo "fuzz-batch: $(FUZZ_BATCH_N) batteries from seed $$seed"; \
	FUZZ_BATCH_N=$(FUZZ_BATCH_N) FUZZ_BATCH_SEED=$$seed ./$(SEER_BIN) tests/lua/run.lua tests/lua/test_fuzz_batch.lua && \
	FUZZ_API_N=$(FUZZ_API_N) FUZZ_TENSOR_N=$(FUZZ_TENSOR_N) FUZZ_API_SEED=$$seed ./$(SEER_BIN) tests/lua/run.lua tests/lua/test_fuzz_api.lua

# The notebook pipeline under load (issue 19): tests/soak/notebook_soak.lua, the heavy versions of
# tests/lua/test_notebook_pipeline.lua (which make test runs).
soak: $(SEER_BIN)
	@./$(SEER_BIN) tests/lua/run.lua tests/soak/notebook_soak.lua

# The Python peers for make bench (torch + transformers from PyPI) in a git-ignored venv, and
# llama.cpp through llama-cpp-python built from its source package (a CPU build, compiled here)
# with gguf for llama.cpp's convert_hf_to_gguf.py (shipped inside that source package).
bench-setup:
	python3 -m venv .venv
	.venv/bin/pip install -q torch transformers safetensors tokenizers peft
	.venv/bin/pip install -q gguf sentencepiece
	CMAKE_ARGS="-DGGML_CUDA=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF" .venv/bin/pip install -q --no-binary llama-cpp-python llama-cpp-python
	.venv/bin/pip download -q --no-binary llama-cpp-python --no-deps -d .venv/sdist llama-cpp-python

# The attack suite alone (docs/security.md): every tests/lua/test_attack_*.lua in one process, so
# the totals check sees them all. make test runs the same files.
attack: $(SEER_BIN)
	./$(SEER_BIN) tests/lua/run.lua $(sort $(wildcard tests/lua/test_attack_*.lua))

asan:
	@$(MAKE) --no-print-directory BUILD=build/asan SANITIZE=1 CFLAGS="-O1 -g" test

demo: setup
	@$(MAKE) --no-print-directory all
	./seer experiments/hello/main.lua
	./seer experiments/introspection/main.lua --small

install: $(SEER_BIN)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/seer $(DESTDIR)$(PREFIX)/share/doc/seer
	install -m 755 $(SEER_BIN) $(DESTDIR)$(PREFIX)/bin/seer
	rm -rf $(DESTDIR)$(PREFIX)/share/seer/lua
	cp -R lua $(DESTDIR)$(PREFIX)/share/seer/lua
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/seer/
	cp -R docs/. $(DESTDIR)$(PREFIX)/share/doc/seer/

uninstall:
	rm -rf $(DESTDIR)$(PREFIX)/bin/seer $(DESTDIR)$(PREFIX)/share/seer $(DESTDIR)$(PREFIX)/share/doc/seer

clean:
	rm -rf build seer

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# The config-field test against the installed transformers' config classes (make bench-setup's
# .venv), e.g. after upgrading it: a new attribute seer does not classify fails the test.
.PHONY: config-fields
config-fields: $(SEER_BIN)
	@f=$$(mktemp /tmp/seer-fields.XXXXXX.json) && .venv/bin/python tests/parity/config_fields.py "$$f" && \
	  SEER_CONFIG_FIELDS="$$f" ./$(SEER_BIN) tests/lua/run.lua tests/lua/test_model_config_fields.lua; \
	  rc=$$?; rm -f "$$f"; exit $$rc

# The tokenizer differential fuzz test run live against Hugging Face's `tokenizers` (from make
# bench-setup's .venv) with a fresh seed (SEED=N to repeat one): 5,000 new strings per
# tokenizer.json, compared at once; make test uses the stored goldens (tests/parity/tokenizer_fuzz.json).
.PHONY: tokenizer-fuzz
tokenizer-fuzz: $(SEER_BIN)
	@f=$$(mktemp /tmp/seer-tokfuzz.XXXXXX.json) && \
	  .venv/bin/python tests/parity/tokenizer_fuzz.py "$$f" --seed $${SEED:-$$(date +%s)} && \
	  SEER_TOKENIZER_FUZZ="$$f" ./$(SEER_BIN) tests/lua/run.lua tests/lua/test_tokenizer_fuzz.lua; \
	  rc=$$?; rm -f "$$f"; exit $$rc
