/*
 * gpufrac/error.h - the one list of error codes used across gpufrac.
 *
 * Every fallible function returns 0 on success or a negative GF_E* code.
 * The list is append-only: a code's number never changes once released, so
 * logs and wire messages stay comparable across versions.  Name and message
 * come from the same X-macro, so the three can never drift apart.
 */
#ifndef GPUFRAC_ERROR_H
#define GPUFRAC_ERROR_H

/* X(name, number, message) */
#define GF_ERRNO_MAP(X)                                                        \
  X(INVAL, 1, "invalid argument")                                              \
  X(NOMEM, 2, "out of memory")                                                 \
  X(RANGE, 3, "value out of range")                                            \
  X(SYNTAX, 4, "malformed input")                                              \
  X(NOTFOUND, 5, "not found")                                                  \
  X(NOFIT, 6, "does not fit")                                                  \
  X(IO, 7, "input/output error")                                               \
  X(EXIST, 8, "already exists")                                                \
  X(LIMIT, 9, "limit exceeded")                                                \
  X(STATE, 10, "operation not valid in this state")                            \
  X(CONFLICT, 11, "conflict: the object changed")                              \
  X(GONE, 12, "gone: the requested version is too old")                        \
  X(HTTP, 13, "HTTP request failed")

enum gf_errno {
#define GF__ERR_ENUM(name, num, msg) GF_E##name = -(num),
  GF_ERRNO_MAP(GF__ERR_ENUM)
#undef GF__ERR_ENUM
};

/* Human-readable message for a GF_E* code; never NULL. */
const char *gf_strerror(int err);

/* Symbolic name such as "GF_ENOFIT"; never NULL. */
const char *gf_err_name(int err);

#endif
