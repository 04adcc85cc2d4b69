# SPDX-License-Identifier: GPL-2.0
# nvpeer.ko build rules, included by the top-level Makefile.
#
#   make / make modules   build nvpeer.ko against KDIR (runs preflight first)
#   make preflight        check prerequisites; one line naming the first missing one
#   make ffi-check        compare src/ffi.rs with bindgen output of peer_mem.h / nv-p2p.h
#   make clean
#
# Variables: KDIR (default: running kernel), OFED_DIR, NVIDIA_SRC, OFED_SYMVERS, NVIDIA_SYMVERS,
# RUSTC (default: the kernel's own rustc, found by the preflight), BENCH=1 (emulator headers and
# symbols of the test bench; nothing else builds against them, see Kbuild),
# NVPEER_MODULE (nvpeer, default here, or nvidia-peermem: the module name, see Kbuild; `make
# install` and DKMS use nvidia-peermem), NVPEER_COMPAT=oldest (the oldest-API test build, on the
# command line only: Kbuild ignores it from the environment, docs/compatibility.md).

NVPEER_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
NVPEER_MODULE ?= nvpeer
NVPEER_PREFLIGHT = KDIR="$(KDIR)" OFED_DIR="$(OFED_DIR)" NVIDIA_SRC="$(NVIDIA_SRC)" \
	OFED_SYMVERS="$(OFED_SYMVERS)" NVIDIA_SYMVERS="$(NVIDIA_SYMVERS)" RUSTC="$(RUSTC)" \
	BENCH="$(BENCH)" $(NVPEER_ROOT)/scripts/preflight.sh

.PHONY: all modules clean preflight ffi-check

all: modules

modules:
	@args=$$($(NVPEER_PREFLIGHT) --make-args) || exit 1; \
	eval '$(MAKE) -C "$(KDIR)" M="$(NVPEER_ROOT)" NVPEER_MODULE=$(NVPEER_MODULE)' "$$args" modules

preflight:
	@$(NVPEER_PREFLIGHT)

ffi-check:
	@$(NVPEER_ROOT)/scripts/ffi-check.sh

clean:
	$(MAKE) -C "$(KDIR)" M="$(NVPEER_ROOT)" clean
	rm -f $(NVPEER_ROOT)/build/generated.symvers
