/*
 * api/codec_impl.h - what api/codec.c and api/codec_params.c share and no
 * one else sees: the flag that tells a failed jansson allocation.
 */
#ifndef API_CODEC_IMPL_H
#define API_CODEC_IMPL_H

#include <stdbool.h>

/* Set by the codec's jansson allocator when an allocation fails, on this
 * thread; whoever parses or dumps clears it first and checks it after
 * (jansson 2.14 sometimes carries on after a failure). */
extern _Thread_local bool codec_alloc_failed;

#endif /* API_CODEC_IMPL_H */
