/*
 * What the fuzz targets of the gRPC servers (fuzz_dp_frames,
 * fuzz_dra_grpc) share: raw bytes sent to a server as an HTTP/2 client
 * would, after its preface.
 */
#ifndef GPUFRAC_FUZZ_H2_H
#define GPUFRAC_FUZZ_H2_H

#include <stddef.h>
#include <stdint.h>

/* Connects to the unix socket sock, sends the HTTP/2 client preface and
 * then data[0..size), half-closes, and reads what the server says until it
 * closes or is silent for 2 s.  Aborts when it cannot connect: the server
 * must always accept. */
void fh_raw(const char *sock, const uint8_t *data, size_t size);

#endif
