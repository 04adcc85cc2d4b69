// SPDX-License-Identifier: GPL-2.0
/*
 * nv_peer_mem.ko: the classic client again, under the module name of Mellanox's nv_peer_mem.
 * It is a second nv_mem provider that only the module name reveals: on the DOCA-OFED model the
 * core keeps no client directory and accepts a second "nv_mem", so nvpeer has to find it in
 * /sys/module (suites 20-nvpeer-load, 26-detection). Same code, its own object: kbuild gives each
 * module its own KBUILD_MODNAME.
 */
#include "classic_peer.c"
