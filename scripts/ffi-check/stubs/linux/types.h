/* Minimal stand-ins so bindgen can parse the peer-memory and NVIDIA P2P API headers alone.
 * Only the types those headers use; kernel structs stay opaque (scripts/ffi-check/check.py). */
#ifndef NVPEER_FFI_CHECK_TYPES_H
#define NVPEER_FFI_CHECK_TYPES_H
typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef unsigned char uint8_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long size_t;
typedef _Bool bool;
#endif
