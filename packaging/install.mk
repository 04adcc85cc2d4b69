# SPDX-License-Identifier: GPL-2.0
# Installation rules of nvpeer, included by the top-level Makefile (docs/install.md).
#
#   make install            build, install nvpeer for KDIR's kernel as nvidia-peermem.ko (updates/:
#                           depmod prefers it to the NVIDIA driver's copy), the modprobe.d file
#                           and the systemd unit, run depmod
#   make uninstall          remove all of that again
#   make sign KEY=k CERT=c  sign nvpeer.ko with the kernel's scripts/sign-file (HASH=sha256,
#                           SIGN_FILE=<path> where the headers keep it elsewhere)
#   make dkms-install       copy the sources to $(DKMS_SOURCE_TREE)/nvpeer-<version>, dkms
#                           add/build/install (as nvidia-peermem, dkms.conf), the modprobe.d file,
#                           the unit and DKMS's version-override entry (DKMS_FORCE_DIR); when a
#                           step fails (the PRE_BUILD preflight's one line naming the fix, a
#                           failed build: its log kept at DKMS_BUILD_LOG) all of that is undone
#                           (packaging/dkms-install.sh)
#   make dkms-uninstall     dkms remove --all, delete the source copy, the modprobe.d file, the unit,
#                           the override entry, and the directories dkms-install created for them
#
# Variables: KDIR, DESTDIR (staging root; skips depmod), INSTALL_MOD_DIR (default updates),
# NVPEER_MODULE (default here nvidia-peermem; nvpeer installs the side-by-side name),
# DKMS_FORCE_DIR (default /usr/share/dkms/modules_to_force_install),
# SYSTEMD_DIR, MODPROBE_DIR, DKMS (dkms command), DKMS_SOURCE_TREE (default /usr/src),
# DKMS_FLAGS (more dkms options, e.g. --dkmstree/--installtree), DKMS_TREE (dkms's own tree,
# default /var/lib/dkms: the same as a --dkmstree in DKMS_FLAGS), NVPEER_MAKE_ARGS (extra make
# arguments for the DKMS build: OFED_DIR=, NVIDIA_SRC=, RUSTC=, BENCH=1), DKMS_BUILD_LOG (where
# a failed dkms-install keeps the build's log; default $TMPDIR or /tmp).

NVPEER_TOP := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/..)
NVPEER_VERSION := $(shell sed -n 's/^NVPEER_VERSION[[:space:]]*:=[[:space:]]*//p' $(NVPEER_TOP)/Kbuild)
NVPEER_KREL = $(shell cat $(KDIR)/include/config/kernel.release 2>/dev/null)
INSTALL_MOD_DIR ?= updates
# What install and sign act on: the drop-in name unless NVPEER_MODULE is given (the build below
# them inherits it; a plain `make` builds nvpeer.ko).
install sign: NVPEER_MODULE = nvidia-peermem
NVPEER_KO_NAMES := nvpeer nvidia-peermem
# DKMS refuses to install a module whose version is lower than one already in the kernel's tree
# (NVIDIA's nvidia-peermem.ko carries the driver's version, 5xx): this entry tells dkms that
# nvpeer replaces it knowingly (dkms's force_installation, "<package>_version-override").
DKMS_FORCE_DIR ?= /usr/share/dkms/modules_to_force_install
MODPROBE_DIR ?= /etc/modprobe.d
SYSTEMD_DIR ?= /etc/systemd/system
DKMS ?= dkms
DKMS_SOURCE_TREE ?= /usr/src
DKMS_FLAGS ?=
DKMS_TREE ?= /var/lib/dkms
DKMS_ALL_FLAGS = --sourcetree "$(DKMS_SOURCE_TREE)" $(DKMS_FLAGS)
DKMS_SRC = $(DKMS_SOURCE_TREE)/nvpeer-$(NVPEER_VERSION)
HASH ?= sha256
# Debian ships it in linux-kbuild-<ver>; other distros in the headers package.
SIGN_FILE ?= $(KDIR)/scripts/sign-file

# What a DKMS source tree needs: the build system and the module sources; for the test bench
# (BENCH=1) also the emulators' headers and Module.symvers. A tree for a real node carries neither,
# so nothing can build nvpeer there against the emulators' ABI.
NVPEER_DKMS_FILES := Makefile Kbuild dkms.conf src scripts uapi packaging
NVPEER_DKMS_BENCH := $(if $(filter BENCH=1,$(NVPEER_MAKE_ARGS)),1)

.PHONY: install uninstall sign dkms-install dkms-uninstall dkms-source

# The directories dkms-install creates for its files (with their missing parents), children before
# parents, listed there by packaging/dkms-install.sh: dkms-uninstall removes those again when they
# are empty, never one the node had before.
NVPEER_DKMS_DIRS = $(DKMS_SRC)/.nvpeer-created-dirs
# Where a failed dkms-install keeps dkms's make.log (dkms remove, which undoes the install,
# deletes dkms's own copy).
DKMS_BUILD_LOG ?= $(or $(TMPDIR),/tmp)/nvpeer-dkms-build-$(NVPEER_VERSION)-$(NVPEER_KREL).log

install: modules
	@[ -n "$(NVPEER_KREL)" ] || { echo "nvpeer install: cannot read $(KDIR)/include/config/kernel.release" >&2; exit 1; }
	$(MAKE) -C "$(KDIR)" M="$(NVPEER_TOP)" NVPEER_MODULE=$(NVPEER_MODULE) INSTALL_MOD_DIR="$(INSTALL_MOD_DIR)" \
		$(if $(DESTDIR),INSTALL_MOD_PATH="$(DESTDIR)") DEPMOD=/bin/true modules_install
	install -D -m 0644 "$(NVPEER_TOP)/packaging/modprobe.d/nvpeer.conf" "$(DESTDIR)$(MODPROBE_DIR)/nvpeer.conf"
	install -D -m 0644 "$(NVPEER_TOP)/packaging/systemd/nvpeer.service" "$(DESTDIR)$(SYSTEMD_DIR)/nvpeer.service"
	@if [ -z "$(DESTDIR)" ]; then depmod -a "$(NVPEER_KREL)"; fi
	@echo "nvpeer $(NVPEER_VERSION) installed for $(NVPEER_KREL) as $(NVPEER_MODULE): 'modprobe $(NVPEER_MODULE)', then 'nvpeer doctor'; at boot: 'systemctl enable nvpeer'"

uninstall:
	@[ -n "$(NVPEER_KREL)" ] || { echo "nvpeer uninstall: cannot read $(KDIR)/include/config/kernel.release" >&2; exit 1; }
	for m in $(NVPEER_KO_NAMES); do for z in "" .xz .zst .gz; do \
		rm -f "$(DESTDIR)/lib/modules/$(NVPEER_KREL)/$(INSTALL_MOD_DIR)/$$m.ko$$z"; done; done
	rm -f "$(DESTDIR)$(MODPROBE_DIR)/nvpeer.conf" "$(DESTDIR)$(SYSTEMD_DIR)/nvpeer.service" "$(DESTDIR)$(DKMS_FORCE_DIR)/nvpeer"
	@if [ -z "$(DESTDIR)" ]; then depmod -a "$(NVPEER_KREL)"; fi

# Signs the built module in place (before `make install`, or re-run install afterwards).
sign:
	@[ -n "$(KEY)" ] && [ -n "$(CERT)" ] || { echo "nvpeer sign: usage: make sign KEY=<private key (PEM)> CERT=<certificate (DER or PEM)> [HASH=sha256]" >&2; exit 1; }
	@[ -r "$(KEY)" ] || { echo "nvpeer sign: cannot read KEY=$(KEY)" >&2; exit 1; }
	@[ -r "$(CERT)" ] || { echo "nvpeer sign: cannot read CERT=$(CERT)" >&2; exit 1; }
	@[ -x "$(SIGN_FILE)" ] || { echo "nvpeer sign: $(SIGN_FILE) missing: install the kernel headers / linux-kbuild package (they ship scripts/sign-file) or pass SIGN_FILE=" >&2; exit 1; }
	@[ -f "$(NVPEER_TOP)/$(NVPEER_MODULE).ko" ] || { echo "nvpeer sign: $(NVPEER_MODULE).ko not built yet: run 'make NVPEER_MODULE=$(NVPEER_MODULE)' first" >&2; exit 1; }
	"$(SIGN_FILE)" "$(HASH)" "$(KEY)" "$(CERT)" "$(NVPEER_TOP)/$(NVPEER_MODULE).ko"
	@tail -c 28 "$(NVPEER_TOP)/$(NVPEER_MODULE).ko" | grep -q "Module signature appended" && echo "$(NVPEER_MODULE).ko signed ($(HASH)); enroll $(CERT) with 'mokutil --import' if Secure Boot is on"

# Copies the DKMS source tree (no build outputs).
dkms-source:
	@grep -q '^PACKAGE_VERSION="$(NVPEER_VERSION)"' "$(NVPEER_TOP)/dkms.conf" || { echo "nvpeer: dkms.conf PACKAGE_VERSION differs from Kbuild NVPEER_VERSION=$(NVPEER_VERSION)" >&2; exit 1; }
	rm -rf "$(DKMS_SRC)"
	mkdir -p "$(DKMS_SRC)"
	cd "$(NVPEER_TOP)" && tar -c --exclude='*.o' --exclude='*.ko' --exclude='*.mod' --exclude='*.mod.c' \
		--exclude='.*.cmd' --exclude='*.rmeta' --exclude='.*.d' --exclude='Module.symvers' --exclude='modules.order' \
		--exclude='src/logic/target' --exclude='src/abi_facts.s' --exclude='src/abi_facts.rs' $(NVPEER_DKMS_FILES) $(if $(NVPEER_DKMS_BENCH),testbench/emu/include) | tar -x -C "$(DKMS_SRC)"
	@if [ "$(NVPEER_DKMS_BENCH)" ]; then \
		for d in peer_mem nvp2p; do install -D -m 0644 "$(NVPEER_TOP)/testbench/emu/$$d/Module.symvers" "$(DKMS_SRC)/testbench/emu/$$d/Module.symvers" || exit 1; done; fi

# All or nothing: a step that fails (the build the preflight stops, a dkms error) undoes what the
# run wrote, dkms add included, so the node is as it was (packaging/dkms-install.sh).
dkms-install:
	@NVPEER_TOP="$(NVPEER_TOP)" NVPEER_VERSION="$(NVPEER_VERSION)" KDIR="$(KDIR)" DESTDIR="$(DESTDIR)" \
		DKMS="$(DKMS)" DKMS_SOURCE_TREE="$(DKMS_SOURCE_TREE)" DKMS_FLAGS="$(DKMS_FLAGS)" DKMS_TREE="$(DKMS_TREE)" \
		DKMS_FORCE_DIR="$(DKMS_FORCE_DIR)" MODPROBE_DIR="$(MODPROBE_DIR)" SYSTEMD_DIR="$(SYSTEMD_DIR)" \
		DKMS_BUILD_LOG="$(DKMS_BUILD_LOG)" NVPEER_MAKE_ARGS="$(NVPEER_MAKE_ARGS)" MAKE="$(MAKE)" \
		bash "$(NVPEER_TOP)/packaging/dkms-install.sh"

dkms-uninstall:
	-$(DKMS) remove $(DKMS_ALL_FLAGS) -m nvpeer -v $(NVPEER_VERSION) --all
	rm -f "$(DESTDIR)$(MODPROBE_DIR)/nvpeer.conf" "$(DESTDIR)$(SYSTEMD_DIR)/nvpeer.service" "$(DESTDIR)$(DKMS_FORCE_DIR)/nvpeer"
	@[ ! -f "$(NVPEER_DKMS_DIRS)" ] || while read -r d; do rmdir "$$d" 2>/dev/null || true; done <"$(NVPEER_DKMS_DIRS)"
	rm -rf "$(DKMS_SRC)"
