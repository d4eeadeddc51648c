/*
 * node_discover.h - the names discovery (discover.c) derives, apart for
 * its tests: a GPU's inventory model and a MIG device's profile.  Internal
 * to gpufrac; nothing here is public API.
 */
#ifndef GPUFRAC_NODE_DISCOVER_H
#define GPUFRAC_NODE_DISCOVER_H

#include <stddef.h>
#include <stdint.h>

/* Derives the inventory model name from a product name into model[cap]. */
void gf__node_model_name(const char *name, char *model, size_t cap);

/* The profile-style name of a MIG device into out[cap], as nvidia-smi
 * spells profiles: "<G>g.<M>gb" with G the GPU instance's slices, or
 * "<C>c.<G>g.<M>gb" when the compute instance has fewer slices (C) than its
 * GPU instance.  M is the instance's share of the parent's memory rounded
 * up to eighths (MIG memory comes in eighths), times the parent's memory in
 * GB (GiB, rounded up), rounded: 9856 MiB of an 80 GiB A100 is 1/8 -> 10gb,
 * 40192 MiB is 4/8 -> 40gb.  "" when gi_slices or a size is 0. */
void gf__node_mig_profile(uint32_t gi_slices, uint32_t ci_slices,
                          uint64_t mig_bytes, uint64_t parent_bytes, char *out,
                          size_t cap);

#endif
