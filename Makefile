# Inventory service: one Makefile for the daemon, its tests, the load test and the fuzzer.
#
#   make                  build build/inventoryd
#   make run              install missing packages, start redis-server if none answers, run
#   make run CLUSTER=3    the same against a local Redis Cluster (3 masters + 3 replicas)
#   make run STORE=postgres  the same on a PostgreSQL of its own (temp dir, free port)
#   make run LOCK=redlock|memcached|zookeeper  the same with that lock service of its own
#   make test             every unit and integration test (starts its own redis-server)
#   make loadtest         the full load test (loadtest/run.sh --help for options)
#   make fuzz             build and run the request-parsing fuzzer for FUZZ_SECONDS
#   make SANITIZER=address|undefined|thread   sanitized build under build/<sanitizer>/
#   make soak SECONDS=600  the randomized history checker, round after round (tests/soak.sh)
#   make soak CLUSTER=1    the same on a Redis Cluster with failovers (tests/it_history_cluster.c)
#   make soak PG=1         the same on the PostgreSQL store (tests/it_history_pg.c)
#   make soak LOCKS=1      the same on lock-service SKUs (tests/it_history_locks.c)
#   make install [PREFIX=/usr/local DESTDIR=]   daemon, unit, man page, /etc config
#   make deb              build/inventoryd_<version>_<arch>.deb (packaging/build-deb.sh)
#   make format / make format-check / make clean

PKGS      := libmicrohttpd hiredis jansson libevent libpq libmemcached
# What building and `make run` need (the client libraries of every backend are linked
# in); what the tests, load test and fuzzer add (the servers they start, the tools).
# `make run` installs only the first, and the server its STORE= or LOCK= names.
RUN_PKGS  := gcc make pkg-config libmicrohttpd-dev libhiredis-dev libjansson-dev \
             libevent-dev libpq-dev libmemcached-dev libzookeeper-st-dev redis-server \
             redis-tools curl jq procps python3
DEB_PKGS  := $(RUN_PKGS) libcmocka-dev wrk gnuplot-nox clang libclang-rt-14-dev valgrind \
             redis-sentinel postgresql postgresql-contrib memcached zookeeper
RUN_PKGS  += $(if $(filter postgres,$(STORE)),postgresql) \
             $(if $(filter memcached,$(LOCK)),memcached) $(if $(filter zookeeper,$(LOCK)),zookeeper)
SUDO      := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

CC        ?= cc
OPT       ?= -O2
WARN      := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wwrite-strings -Werror
# Recursive (=) so pkg-config runs only once the packages are installed by `deps`.
CFLAGS    = -std=c11 -D_GNU_SOURCE $(OPT) -g $(WARN) -MMD -MP -I. \
            $(shell pkg-config --cflags $(PKGS)) $(SAN_FLAGS)
LDFLAGS   = $(SAN_FLAGS)
LDLIBS    = $(shell pkg-config --libs $(PKGS)) -lpthread -lm
LDLIBS    += -lzookeeper_st
TEST_LIBS = $(shell pkg-config --libs cmocka)

SANITIZER ?=
ifeq ($(SANITIZER),)
BUILD     := build
else ifeq ($(SANITIZER),address)
BUILD     := build/address
SAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SANITIZER),undefined)
BUILD     := build/undefined
SAN_FLAGS := -fsanitize=undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
else ifeq ($(SANITIZER),thread)
BUILD     := build/thread
SAN_FLAGS := -fsanitize=thread -fno-omit-frame-pointer
else
$(error SANITIZER must be address, undefined or thread)
endif

# The stores and lock services behind the seam, a folder each.
BACKENDS  := segments/redis segments/postgres segments/redlock segments/memcached segments/lockcall \
             segments/zookeeper
LIB_SRC   := $(wildcard base/*.c segments/*.c $(BACKENDS:%=%/*.c) api/*.c) $(filter-out service/main.c,$(wildcard service/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
# Files compiled in as byte arrays by base/embed.sh: the dashboard (api/ui/), the
# Lua scripts (segments/redis/lua/) and the OpenAPI document (api/openapi.json).
UI_FILES  := $(sort $(wildcard api/ui/*))
UI_C      := $(BUILD)/gen/ui_files.c
LUA_FILES := $(sort $(wildcard segments/redis/lua/*.lua))
LUA_C     := $(BUILD)/gen/lua_files.c
OPENAPI_C := $(BUILD)/gen/openapi_files.c
LIB_OBJ   += $(UI_C:%.c=%.o) $(LUA_C:%.c=%.o) $(OPENAPI_C:%.c=%.o)
BIN       := $(BUILD)/inventoryd

UNIT_SRC  := $(wildcard tests/test_*.c)
UNIT_BIN  := $(UNIT_SRC:tests/%.c=$(BUILD)/tests/%)
IT_SRC    := $(wildcard tests/it_*.c)
IT_BIN    := $(IT_SRC:tests/%.c=$(BUILD)/tests/%)
HARNESS   := $(BUILD)/tests/harness.o $(BUILD)/tests/proxy.o $(BUILD)/tests/harness_pg.o \
             $(BUILD)/tests/harness_lock.o
HARNESS   += $(BUILD)/tests/harness_zk.o
HARNESS   += $(BUILD)/tests/harness_view.o
HARNESS   += $(BUILD)/tests/harness_sale.o $(BUILD)/tests/harness_net.o $(BUILD)/tests/harness_ledger.o

.SECONDARY:
.PHONY: all deps deps-run run test unit integration loadtest loadtest-quick fuzz format format-check layers clean \
        soak

all: $(BIN)

$(BIN): $(BUILD)/service/main.o $(LIB_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(UI_C): base/embed.sh $(UI_FILES)
	@mkdir -p $(dir $@)
	base/embed.sh $@ api_ui_files $(UI_FILES)

$(LUA_C): base/embed.sh $(LUA_FILES)
	@mkdir -p $(dir $@)
	base/embed.sh $@ rd_lua_files $(LUA_FILES)

$(OPENAPI_C): base/embed.sh api/openapi.json
	@mkdir -p $(dir $@)
	base/embed.sh $@ api_openapi_files api/openapi.json

$(BUILD)/gen/%.o: $(BUILD)/gen/%.c
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/test_%: $(BUILD)/tests/test_%.o $(LIB_OBJ) $(HARNESS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LIBS)

# Unit tests that place orders through the engine and wait for them (tests/engine_sync.h).
$(BUILD)/tests/test_lock $(BUILD)/tests/test_order $(BUILD)/tests/test_engine \
    $(BUILD)/tests/test_engine_mem: $(BUILD)/tests/engine_sync.o
# The engine over the in-memory store of tests/memstore.h (no Redis).
$(BUILD)/tests/test_engine_mem: $(BUILD)/tests/memstore.o
# The reservation suites' shared calls and view check (tests/resv_env.h).
$(BUILD)/tests/it_reservations $(BUILD)/tests/it_pg_reservations \
    $(BUILD)/tests/it_cluster_reservations: $(BUILD)/tests/resv_env.o

$(BUILD)/tests/it_%: $(BUILD)/tests/it_%.o $(HARNESS)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(TEST_LIBS)

# Integration tests that call the Redis seam itself (the cluster slot map, slots.h;
# the routing of async.h; the key names, keys.h).
$(BUILD)/tests/it_cluster_slots $(BUILD)/tests/it_cluster_route $(BUILD)/tests/it_cluster_failover \
    $(BUILD)/tests/it_cluster_service $(BUILD)/tests/it_cluster_multi \
    $(BUILD)/tests/it_cluster_admin: $(LIB_OBJ)
# The lock services (segments/locksvc.h) driven directly.
$(BUILD)/tests/it_redlock $(BUILD)/tests/it_memcached_lock: $(LIB_OBJ)
# The PostgreSQL store's own calls (segments/postgres/), on a shared fixture (pg_env.h).
$(BUILD)/tests/it_pg_store $(BUILD)/tests/it_pg_sellout: $(LIB_OBJ) $(BUILD)/tests/pg_env.o
# The lock-service suites' shared fixture (tests/lock_env.h).
$(BUILD)/tests/it_lock_services $(BUILD)/tests/it_lock_faults $(BUILD)/tests/it_pg_locks: \
    $(BUILD)/tests/lock_env.o
# ... two of which call the stores' seam directly (the fenced spread).
$(BUILD)/tests/it_lock_services $(BUILD)/tests/it_pg_locks: $(LIB_OBJ)
# The ZooKeeper lock service, called directly (segments/zookeeper/zklock.h).
$(BUILD)/tests/it_zk_lock: $(LIB_OBJ)

# deps: every package of DEB_PKGS (tests, load test, fuzzer); deps-run: RUN_PKGS.
deps:
	@$(call install_missing,$(DEB_PKGS))

deps-run:
	@$(call install_missing,$(RUN_PKGS))

# Installs whatever of the packages $(1) is missing; a no-op when all are present.
install_missing = missing=$$(for p in $(1); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' \
	    || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	    echo "deps: installing" $$missing; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

run: deps-run
	@$(MAKE) --no-print-directory all
	@CLUSTER=$(CLUSTER) STORE=$(STORE) LOCK=$(LOCK) service/run.sh $(BIN) $(ARGS)

test: deps
	@$(MAKE) --no-print-directory $(BIN) $(UNIT_BIN) $(IT_BIN)
	@tests/run.sh $(BUILD)

unit: deps
	@$(MAKE) --no-print-directory $(UNIT_BIN)
	@tests/run.sh --unit $(BUILD)

integration: deps
	@$(MAKE) --no-print-directory $(BIN) $(IT_BIN)
	@tests/run.sh --integration $(BUILD)

loadtest: deps
	@$(MAKE) --no-print-directory all
	@loadtest/run.sh --bin $(BIN) $(ARGS)

loadtest-quick: deps
	@$(MAKE) --no-print-directory all
	@loadtest/run.sh --bin $(BIN) --quick $(ARGS)

FUZZ_SECONDS ?= 20
# keys.c names a key for a slot (seg_key_ack) with slots.c, which brings hiredis;
# skumode.c the lock schemes a SKU may name.
FUZZ_SRC := api/parse.c base/names.c base/text.c base/xalloc.c segments/skumode.c segments/redis/keys.c \
            segments/redis/slots.c
fuzz: deps
	@mkdir -p build/fuzz/corpus
	clang -std=c11 -D_GNU_SOURCE -g -O1 -I. -fsanitize=fuzzer,address,undefined \
	    $(shell pkg-config --cflags jansson hiredis) -o build/fuzz/fuzz_parse \
	    tests/fuzz/fuzz_parse.c $(FUZZ_SRC) $(shell pkg-config --libs jansson hiredis) -lpthread
	build/fuzz/fuzz_parse -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	    -artifact_prefix=build/fuzz/ build/fuzz/corpus tests/fuzz/corpus

FORMAT_SRC = $(wildcard base/*.[ch] service/*.[ch] segments/*.[ch] $(BACKENDS:%=%/*.[ch]) api/*.[ch] tests/*.[ch] tests/fuzz/*.c)
format:
	clang-format -i $(FORMAT_SRC)
# The layering rules of docs/DESIGN.md: no folder includes one that includes it back,
# no two files of segments/ call each other round.
layers: all
	@python3 tests/layers.py $(BUILD)

format-check:
	clang-format --dry-run --Werror $(FORMAT_SRC)

clean:
	rm -rf build

-include $(shell find $(BUILD) -maxdepth 4 -name "*.d" 2>/dev/null)

# The history checker (tests/it_history.c) with a fresh seed per round of SOAK_ROUND
# seconds until SECONDS are used; a failing round prints its seed and how to rerun it.
# CLUSTER=1: its cluster variant (tests/it_history_cluster.c), a fresh 3+3 Redis Cluster
# per round with failovers; HISTORY_CLUSTER_ALL=1 adds every kind and hard failovers.
# PG=1: its PostgreSQL variant (tests/it_history_pg.c), a fresh PostgreSQL per round.
# LOCKS=1: its lock-service variant (tests/it_history_locks.c), fresh servers per round.
SECONDS    ?= 600
SOAK_ROUND ?= 60
SOAK_BIN   := $(if $(CLUSTER),it_history_cluster,$(if $(PG),it_history_pg,$(if $(LOCKS),it_history_locks,it_history)))
soak: deps
	@$(MAKE) --no-print-directory $(BIN) $(BUILD)/tests/$(SOAK_BIN)
	@tests/soak.sh --seconds $(SECONDS) --round $(SOAK_ROUND) $(if $(CLUSTER),--cluster)$(if $(PG), --pg)$(if $(LOCKS), --locks) $(BUILD)

# make install [PREFIX=/usr/local] [DESTDIR=]: the daemon in $(PREFIX)/sbin, the systemd
# unit in $(UNITDIR), the manual page inventoryd(8), /etc/logrotate.d/inventoryd, and
# /etc/inventoryd/inventoryd.json (always under /etc, the path the binary looks for)
# unless one is there already.
# make uninstall removes them but the configuration file. make deb: packaging/build-deb.sh.
PREFIX    ?= /usr/local
DESTDIR   ?=
SBINDIR   ?= $(PREFIX)/sbin
MANDIR    ?= $(PREFIX)/share/man
UNITDIR   ?= $(PREFIX)/lib/systemd/system
CONFDIR   := /etc/inventoryd
.PHONY: install uninstall deb

install: $(BIN)
	install -d $(DESTDIR)$(SBINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(UNITDIR) \
	    $(DESTDIR)$(CONFDIR)
	install -m 0755 $(BIN) $(DESTDIR)$(SBINDIR)/inventoryd
	install -m 0644 docs/inventoryd.8 $(DESTDIR)$(MANDIR)/man8/inventoryd.8
	sed -e 's|@SBINDIR@|$(SBINDIR)|g' -e 's|@CONFDIR@|$(CONFDIR)|g' \
	    packaging/inventoryd.service.in >$(BUILD)/inventoryd.service
	install -m 0644 $(BUILD)/inventoryd.service $(DESTDIR)$(UNITDIR)/inventoryd.service
	install -d $(DESTDIR)/etc/logrotate.d
	install -m 0644 packaging/inventoryd.logrotate $(DESTDIR)/etc/logrotate.d/inventoryd
	@if [ -e $(DESTDIR)$(CONFDIR)/inventoryd.json ]; then \
	    echo "install: keeping the existing $(DESTDIR)$(CONFDIR)/inventoryd.json"; \
	else \
	    echo "install -m 0644 config/inventoryd.json $(DESTDIR)$(CONFDIR)/inventoryd.json"; \
	    install -m 0644 config/inventoryd.json $(DESTDIR)$(CONFDIR)/inventoryd.json; \
	fi
	@if [ -z "$(DESTDIR)" ] && ! getent passwd inventoryd >/dev/null; then \
	    echo "install: the unit runs as user inventoryd; create it with" \
	        "adduser --system --group --no-create-home inventoryd"; \
	fi

uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/inventoryd $(DESTDIR)$(MANDIR)/man8/inventoryd.8 \
	    $(DESTDIR)$(UNITDIR)/inventoryd.service $(DESTDIR)/etc/logrotate.d/inventoryd

deb: deps
	@packaging/build-deb.sh build
