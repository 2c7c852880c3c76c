# lockd - distributed locks as an HTTP/JSON service.
# `make` builds build/lockd and build/lockctl; `make run` and `make test` install what is
# missing first (see `make deps`). SANITIZE=address (ASan+UBSan) or
# SANITIZE=thread build apart, in build-address/ and build-thread/; any
# other build goes apart with BUILD=dir, e.g. make CC=clang BUILD=build-clang.
# `make image` builds the container image (IMAGE=lockd:$(VERSION)) with Docker or
# Podman, whichever can build here. `make fuzz` builds the libFuzzer
# targets (tests/fuzz/) with clang in build-fuzz/ and runs each one.

BUILD    ?= build
VERSION  := 0.1.0
MYSQL_PC := $(shell pkg-config --exists mysqlclient 2>/dev/null && echo mysqlclient || echo libmariadb)
PKGS     := libmicrohttpd gnutls jansson hiredis $(MYSQL_PC)
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wpointer-arith -Wundef -Wvla -Wcast-qual
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_DEFAULT_SOURCE -D_GNU_SOURCE -DTHREADED -I. $(WARN) \
            -DLOCKD_VERSION='"$(VERSION)"' \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lzookeeper_mt -lpthread -lm
# lockctl, the command-line client (cli/), links libcurl and jansson only.
CFLAGS   += $(shell pkg-config --cflags libcurl 2>/dev/null)
CLI_LDLIBS := $(shell pkg-config --libs libcurl jansson 2>/dev/null) -lpthread -lm
SAN_address := -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_thread  := -fsanitize=thread
ifdef SANITIZE
BUILD    := build-$(SANITIZE)
CFLAGS   += $(SAN_$(SANITIZE)) -fno-omit-frame-pointer
LDFLAGS  += $(SAN_$(SANITIZE))
endif
# FUZZ=1 (what `make fuzz` passes on): lockd's objects instrumented for
# libFuzzer, ASan and UBSan, in build-fuzz/ with clang.
SAN_fuzz := -fsanitize=address,undefined -fno-sanitize-recover=all
ifdef FUZZ
BUILD    := build-fuzz
CC       := clang
CFLAGS   += -fsanitize=fuzzer-no-link $(SAN_fuzz) -fno-omit-frame-pointer
LDFLAGS  += $(SAN_fuzz)
endif

# An adapter is a folder backends/NAME/ whose ops table is NAME_backend
# (backends/backend.h). Every folder is built in; `make ADAPTERS="redis"`
# builds fewer (memory always). $(GEN)/adapters.h lists them for
# backends/backend.c, and `lockd --backends` tells what a binary has.
ALL_ADAPTERS := $(notdir $(patsubst %/,%,$(wildcard backends/*/)))
ADAPTERS ?= $(ALL_ADAPTERS)
override ADAPTERS := memory $(filter-out memory,$(filter $(ALL_ADAPTERS),$(ADAPTERS)))
# redlock:// is built from the redis adapter's parts (backends/redis/
# redis_int.h, "fan.c"): asking for it brings redis in.
override ADAPTERS += $(if $(filter redlock,$(ADAPTERS)),$(filter-out $(ADAPTERS),redis))
GEN      := $(BUILD)/gen
CFLAGS   += -I$(GEN)

SRCS     := $(wildcard lib/*.c api/*.c service/*.c backends/*.c) \
            $(foreach a,$(ADAPTERS),$(wildcard backends/$(a)/*.c))
OBJS     := $(patsubst %.c,$(BUILD)/%.o,$(SRCS))
LIBOBJS  := $(filter-out $(BUILD)/service/main.o,$(OBJS))
# Lua scripts and other text an adapter embeds: backends/x/y.lua becomes
# $(GEN)/backends/x/y.lua.h, one C string literal to #include.
EMBED    := $(foreach a,$(ADAPTERS),$(wildcard backends/$(a)/*.lua))
EMBEDDED := $(patsubst %,$(GEN)/%.h,$(EMBED))
# lockctl: cli/*.c on the leaf library lib/ (tests/check_arrows.py), of
# which it uses the clock and the random tokens (in hex, lib/text) only.
CLI_OBJS := $(patsubst %.c,$(BUILD)/%.o,$(wildcard cli/*.c))
CLI_LIBOBJS := $(BUILD)/lib/clock.o $(BUILD)/lib/random.o $(BUILD)/lib/text.o
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNITS    := $(patsubst %.c,$(BUILD)/%,$(UNIT_SRCS))
# The libFuzzer targets: every tests/fuzz/fuzz_*.c is one program.
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZERS  := $(patsubst %.c,$(BUILD)/%,$(FUZZ_SRCS))
FUZZ_SECONDS ?= 60

FORMATTED := $(wildcard lib/*.[ch] api/*.[ch] service/*.[ch] backends/*.[ch] \
              backends/*/*.[ch] cli/*.[ch] tests/unit/*.[ch] tests/fuzz/*.[ch])

.PHONY: FORCE all run test unit e2e deps deps-build deps-bench bench chaos image clean format format-check \
        fuzz fuzz-build fuzz-targets

all: $(BUILD)/lockd $(BUILD)/lockctl

$(BUILD)/lockd: $(OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/lockctl: $(CLI_OBJS) $(CLI_LIBOBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(CLI_LDLIBS)

$(OBJS): | $(GEN)/adapters.h $(EMBEDDED)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/unit/%: tests/unit/%.c $(LIBOBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -MF $@.d $(LDFLAGS) -o $@ $< $(LIBOBJS) $(LDLIBS)

$(BUILD)/tests/fuzz/%: tests/fuzz/%.c $(LIBOBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fsanitize=fuzzer -MMD -MP -MF $@.d $(LDFLAGS) -o $@ $< $(LIBOBJS) $(LDLIBS)

# Rewritten only when the list changes, so nothing rebuilds for nothing.
$(GEN)/adapters.h: FORCE
	@mkdir -p $(@D)
	@printf '%s\n' $(foreach a,$(ADAPTERS),'LOCKD_ADAPTER($(a))') >$@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@

$(GEN)/%.lua.h: %.lua
	@mkdir -p $(@D)
	sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$$/\\n"/' $< >$@

FORCE:

-include $(OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(UNITS:=.d) $(FUZZERS:=.d)

# Build dependencies only: enough for `make` and `make run`.
deps-build:
	@deploy/debian-deps.sh build

# Everything `make test` needs, servers included.
deps:
	@deploy/debian-deps.sh build test

deps-bench:
	@deploy/debian-deps.sh build test bench

# exec: lockd replaces the recipe's shell, so the SIGTERM that make passes
# on to its child when a user kills make's PID reaches lockd (else lockd
# kept running, orphaned, on its port).
run: deps-build
	$(MAKE) all
	exec $(BUILD)/lockd --backend memory:// --listen $${LOCKD_LISTEN:-127.0.0.1:8080}

unit: $(BUILD)/lockd $(BUILD)/lockctl $(UNITS)

# The test command: unit tests, then the end-to-end suite on every backend
# against real servers started on loopback. Ends with "N passed, N failed".
test: deps
	python3 tests/check_arrows.py
	$(MAKE) unit
	LOCKD_BIN=$(BUILD)/lockd LOCKD_BUILD=$(BUILD) python3 tests/run.py $(TESTFLAGS)

# The fault suite (docs/chaos.md): every chaos scenario on every store, one
# line each, then those lines again and their totals. Needs root for the
# network namespaces (the partition scenarios skip without it).
CHAOS_REPORT ?= $(BUILD)/chaos-report.jsonl
chaos: deps
	$(MAKE) all
	@rm -f $(CHAOS_REPORT)
	LOCKD_CHAOS=full LOCKD_CHAOS_REPORT=$(CHAOS_REPORT) LOCKD_BIN=$(BUILD)/lockd LOCKD_BUILD=$(BUILD) \
	  python3 tests/run.py --no-unit -k chaos: $(TESTFLAGS); rc=$$?; \
	  python3 tests/e2e/test_chaos.py --totals $(CHAOS_REPORT) || rc=1; exit $$rc

# The container image, with Docker or Podman (whichever can build here).
IMAGE    ?= lockd:$(VERSION)
image:
	@deploy/image.sh $(IMAGE)

bench: deps-bench
	$(MAKE) $(BUILD)/lockd
	BUILD=$(BUILD) tests/bench/run

# The fuzz targets, built in build-fuzz/ (fuzz-targets is what FUZZ=1
# builds). `make fuzz` then runs each for FUZZ_SECONDS on a copy of its
# seed corpus (tests/fuzz/README.md) and fails on any crash, leak or hang.
fuzz-build:
	$(MAKE) FUZZ=1 fuzz-targets

fuzz-targets: $(FUZZERS)

fuzz: fuzz-build
	python3 tests/fuzz/run.py --seconds $(FUZZ_SECONDS) --build build-fuzz

clean:
	rm -rf build build-*

format:
	clang-format -i $(FORMATTED)

format-check:
	clang-format --dry-run -Werror $(FORMATTED)
