# SPDX-License-Identifier: GPL-2.0
# The nvpeer tools image, included by the top-level Makefile (docs/operations.md, "Tools image").
#
#   make image  an OCI image of the nvpeer CLI from nvpeer-tools_<v>_<arch>.deb (make deb) on a
#               Debian root made with mmdebstrap, committed with buildah as IMAGE_TAG in the local
#               containers-storage and written as the OCI archive IMAGE_OUT
#
# Variables: IMAGE_DEB (the .deb to install; default: `make deb`'s, built first), IMAGE_TAG
# (default nvpeer-tools:<v>), IMAGE_OUT (default build/image/nvpeer-tools_<v>.oci.tar),
# IMAGE_SUITE, IMAGE_MIRROR (packaging/image/build.sh).

IMAGE_TAG ?= nvpeer-tools:$(NVPEER_VERSION)
IMAGE_OUT ?= $(NVPEER_TOP)/build/image/nvpeer-tools_$(NVPEER_VERSION).oci.tar

.PHONY: image

ifeq ($(IMAGE_DEB),)
image: deb
	@"$(NVPEER_TOP)/packaging/image/build.sh" "$$(ls "$(DEB_OUT)"/nvpeer-tools_$(NVPEER_VERSION)_*.deb | head -n 1)" "$(IMAGE_OUT)" "$(IMAGE_TAG)"
else
image:
	@"$(NVPEER_TOP)/packaging/image/build.sh" "$(IMAGE_DEB)" "$(IMAGE_OUT)" "$(IMAGE_TAG)"
endif
