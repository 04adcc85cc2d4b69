# nvpeer: GPUDirect RDMA peer-memory client (Rust-for-Linux).
#
#   make                build nvpeer.ko against KDIR (default: the running kernel)
#   make demo           boot the test bench and show a registration + invalidation, step by step
#   make check          host unit tests + every bench suite (installs what it needs)
#   make fmt-check      rustfmt: src/ with the kernel's .rustfmt.toml, userspace-tests/ (cargo fmt)
#   make fmt            apply what fmt-check asks for
#   make lint           nvpeer.ko built with CLIPPY=1 (no warning), cargo clippy -D warnings on the
#                       userspace workspace and src/logic, shellcheck on every script, the kernel
#                       tree's checkpatch.pl on src/ and the emulators (testbench/lint; docs/testbench.md)
#   make check-full     the same with every model/ABI combination and soak iteration counts (hours)
#   make vm-shell       interactive shell in the bench VM
#   make bench          registration-path benchmark (bench-results/regpath.json)
#   make bench-memory   its memory pass alone, in a fresh boot (bench-results/regpath-memory.json)
#   make bench-stock    the benchmark on Debian's production kernel (bench-results/stock/)
#   make bench-memory-stock  its memory pass alone, on that kernel
#   make bench-stock-pt the same with the guest's IOMMU in passthrough (bench-results/stock-pt/)
#   make install / uninstall / sign / dkms-install   see docs/install.md
#   make deb            nvpeer-dkms and nvpeer-tools .debs in build/deb (debhelper, dh-dkms)
#   make image          the tools image (OCI) of nvpeer-tools, with mmdebstrap and buildah

KDIR ?= /lib/modules/$(shell uname -r)/build
export KDIR

.PHONY: all default check check-full fmt-check fmt lint demo vm-shell bench bench-memory bench-stock bench-memory-stock bench-stock-pt
default: all

# Module build rules (modules, clean, preflight, ffi-check).
-include scripts/build.mk
# Installation, DKMS and signing rules.
-include packaging/install.mk
# Debian packages (make deb).
-include packaging/deb.mk
# The tools image (make image).
-include packaging/image.mk

check:
	@testbench/check

check-full:
	@NVPEER_DEPTH=full testbench/check

fmt-check:
	@testbench/lint fmt-check

fmt:
	@testbench/lint fmt

lint:
	@testbench/lint lint

demo:
	@testbench/demo

vm-shell:
	@testbench/vm shell

bench:
	@testbench/bench/run

bench-memory:
	@testbench/bench/run memory

bench-stock:
	@NVPEER_VM_KERNEL=stock testbench/bench/run

bench-memory-stock:
	@NVPEER_VM_KERNEL=stock testbench/bench/run memory

bench-stock-pt:
	@NVPEER_VM_KERNEL=stock NVPEER_VM_IOMMU=pt testbench/bench/run
