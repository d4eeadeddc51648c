/*
 * Reads a shim config with the interposer's own parser
 * (src/shim/shim_config.c) and prints what the interposer would enforce, one
 * "key value" a line: "memory.<i> <bytes>" for every CUDA device with a
 * limit, "uuid.<k> <uuid> <bytes>" for each uuid line, "compute <pct>",
 * "region <path>".  Exit 1 with the parser's message when it refuses the
 * file.  For tests that check a prepared claim's limits (test_dra_node).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_config.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: shimconf_dump FILE\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  static char text[65536];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  gf_shim_config c;
  memset(&c, 0, sizeof(c));
  char err[512] = "";
  if (gf__shim_config_parse(text, &c, err, sizeof(err)) != 0) {
    fprintf(stderr, "%s: %s\n", argv[1], err);
    return 1;
  }
  for (int i = 0; i < GF_REGION_DEVICES; i++)
    if (c.memory[i])
      printf("memory.%d %llu\n", i, (unsigned long long)c.memory[i]);
  for (uint32_t k = 0; k < c.nuuid; k++)
    printf("uuid.%u %s %llu\n", k, c.uuid[k],
           (unsigned long long)c.uuid_memory[k]);
  printf("compute %u\n", c.compute_pct);
  printf("region %s\n", c.region);
  return 0;
}
