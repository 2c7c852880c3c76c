# lockd - distributed locks as an HTTP/JSON service.
# `make` builds build/lockd; `make run` and `make test` install what is
# missing first (see `make deps`). SANITIZE=address (ASan+UBSan) or
# SANITIZE=thread build apart, in build-address/ and build-thread/.
# `make image` builds the container image (IMAGE=lockd:dev) with Docker or
# Podman, whichever can build here.

BUILD    ?= build
VERSION  := 0.1.0
MYSQL_PC := $(shell pkg-config --exists mysqlclient 2>/dev/null && echo mysqlclient || echo libmariadb)
PKGS     := libmicrohttpd jansson hiredis $(MYSQL_PC)
WARN     := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
            -Wformat=2 -Wpointer-arith -Wundef -Wvla -Wcast-qual
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_DEFAULT_SOURCE -D_GNU_SOURCE -DTHREADED -I. $(WARN) \
            -DLOCKD_VERSION='"$(VERSION)"' \
            $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LDLIBS   += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lzookeeper_mt -lpthread -lm
SAN_address := -fsanitize=address,undefined -fno-sanitize-recover=all
SAN_thread  := -fsanitize=thread
ifdef SANITIZE
BUILD    := build-$(SANITIZE)
CFLAGS   += $(SAN_$(SANITIZE)) -fno-omit-frame-pointer
LDFLAGS  += $(SAN_$(SANITIZE))
endif

# An adapter is built in when its file exists (backends/redis.c, ...).
ADAPTERS := $(filter redis zookeeper mysql,$(basename $(notdir $(wildcard backends/*.c))))
CFLAGS   += $(foreach a,$(ADAPTERS),-DLOCKD_WITH_$(shell echo $(a) | tr a-z A-Z))

# `make ADAPTERS=` builds without them.
UNBUILT  := $(patsubst %,backends/%.c,$(filter-out $(ADAPTERS),redis zookeeper mysql))
SRCS     := $(filter-out $(UNBUILT),$(wildcard service/*.c api/*.c backends/*.c))
OBJS     := $(patsubst %.c,$(BUILD)/%.o,$(SRCS))
LIBOBJS  := $(filter-out $(BUILD)/service/main.o,$(OBJS))
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNITS    := $(patsubst %.c,$(BUILD)/%,$(UNIT_SRCS))

.PHONY: all run test unit e2e deps deps-build deps-bench bench image clean format format-check

all: $(BUILD)/lockd

$(BUILD)/lockd: $(OBJS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(BUILD)/tests/unit/%: tests/unit/%.c $(LIBOBJS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -MMD -MP -MF $@.d $(LDFLAGS) -o $@ $< $(LIBOBJS) $(LDLIBS)

# backend.c's table depends on which adapters exist
$(BUILD)/backends/backend.o: $(wildcard $(patsubst %,backends/%.c,$(ADAPTERS)))

-include $(OBJS:.o=.d) $(UNITS:=.d)

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
	$(MAKE) $(BUILD)/lockd
	exec $(BUILD)/lockd --backend memory:// --listen $${LOCKD_LISTEN:-127.0.0.1:8080}

unit: $(BUILD)/lockd $(UNITS)

# The test command: unit tests, then the end-to-end suite on every backend
# against real servers started on loopback. Ends with "N passed, N failed".
test: deps
	$(MAKE) unit
	LOCKD_BIN=$(BUILD)/lockd LOCKD_BUILD=$(BUILD) python3 tests/run.py $(TESTFLAGS)

# The container image, with Docker or Podman (whichever can build here).
IMAGE    ?= lockd:dev
image:
	@deploy/image.sh $(IMAGE)

bench: deps-bench
	$(MAKE) $(BUILD)/lockd
	BUILD=$(BUILD) tests/bench/run

clean:
	rm -rf build build-address build-thread

format:
	clang-format -i $(SRCS) $(wildcard service/*.h api/*.h backends/*.h tests/unit/*.[ch])

format-check:
	clang-format --dry-run -Werror $(SRCS) $(wildcard service/*.h api/*.h backends/*.h tests/unit/*.[ch])
