# SPDX-License-Identifier: GPL-2.0
# Debian packages of nvpeer, included by the top-level Makefile (docs/install.md, "Debian packages").
#
#   make deb    build nvpeer-dkms_<v>_all.deb (DKMS source, modprobe.d, systemd unit; installs the
#               module as nvidia-peermem) and nvpeer-tools_<v>_<arch>.deb (the nvpeer CLI) into
#               DEB_OUT (default build/deb) with debhelper + dh-dkms (packaging/debian/)
#
# Variables: NVPEER_CLI (the nvpeer binary to package; default: `cargo build --release` of
# userspace-tests, in CARGO_TARGET_DIR when set), DEB_OUT.

DEB_OUT ?= $(NVPEER_TOP)/build/deb
NVPEER_DEB_STAGE = $(NVPEER_TOP)/build/deb-stage
NVPEER_CARGO_TARGET = $(or $(CARGO_TARGET_DIR),$(NVPEER_TOP)/userspace-tests/target)
NVPEER_CLI_BIN = $(or $(NVPEER_CLI),$(NVPEER_CARGO_TARGET)/release/nvpeer)

.PHONY: deb

deb:
	@for t in dpkg-buildpackage dh dh_dkms; do command -v $$t >/dev/null || { echo "nvpeer deb: $$t not found: install debhelper and dh-dkms (apt install debhelper dh-dkms)" >&2; exit 1; }; done
	@grep -q '^PACKAGE_VERSION="$(NVPEER_VERSION)"' "$(NVPEER_TOP)/dkms.conf" || { echo "nvpeer deb: dkms.conf PACKAGE_VERSION differs from Kbuild NVPEER_VERSION=$(NVPEER_VERSION)" >&2; exit 1; }
	@if [ -z "$(NVPEER_CLI)" ]; then \
		command -v cargo >/dev/null || { echo "nvpeer deb: no cargo to build the nvpeer CLI: install cargo or pass NVPEER_CLI=<nvpeer binary>" >&2; exit 1; }; \
		cd "$(NVPEER_TOP)/userspace-tests" && cargo build --release --quiet --bin nvpeer; fi
	@[ -x "$(NVPEER_CLI_BIN)" ] || { echo "nvpeer deb: $(NVPEER_CLI_BIN) is not an executable: build the CLI or pass NVPEER_CLI=" >&2; exit 1; }
	rm -rf "$(NVPEER_DEB_STAGE)"
	mkdir -p "$(NVPEER_DEB_STAGE)/nvpeer-$(NVPEER_VERSION)" "$(DEB_OUT)"
	cd "$(NVPEER_TOP)" && tar -c --exclude='*.o' --exclude='*.ko' --exclude='*.mod' --exclude='*.mod.c' \
		--exclude='.*.cmd' --exclude='*.rmeta' --exclude='.*.d' --exclude='Module.symvers' --exclude='modules.order' \
		--exclude='src/logic/target' --exclude='src/abi_facts.s' --exclude='src/abi_facts.rs' --exclude='packaging/debian' Makefile Kbuild dkms.conf src scripts uapi packaging \
		| tar -x -C "$(NVPEER_DEB_STAGE)/nvpeer-$(NVPEER_VERSION)"
	cp -a "$(NVPEER_TOP)/packaging/debian" "$(NVPEER_DEB_STAGE)/nvpeer-$(NVPEER_VERSION)/debian"
	install -m 0755 "$(NVPEER_CLI_BIN)" "$(NVPEER_DEB_STAGE)/nvpeer-$(NVPEER_VERSION)/nvpeer"
	printf 'nvpeer (%s) unstable; urgency=medium\n\n  * Built from the nvpeer repository by make deb.\n\n -- %s  %s\n' \
		"$(NVPEER_VERSION)" "$$(sed -n 's/^Maintainer: //p' "$(NVPEER_TOP)/packaging/debian/control")" \
		"$$(date -R)" >"$(NVPEER_DEB_STAGE)/nvpeer-$(NVPEER_VERSION)/debian/changelog"
	cd "$(NVPEER_DEB_STAGE)/nvpeer-$(NVPEER_VERSION)" && dpkg-buildpackage -b -us -uc
	mv "$(NVPEER_DEB_STAGE)"/nvpeer-dkms_$(NVPEER_VERSION)_all.deb "$(NVPEER_DEB_STAGE)"/nvpeer-tools_$(NVPEER_VERSION)_*.deb "$(DEB_OUT)/"
	rm -rf "$(NVPEER_DEB_STAGE)"
	@ls "$(DEB_OUT)"/nvpeer-*_$(NVPEER_VERSION)_*.deb
