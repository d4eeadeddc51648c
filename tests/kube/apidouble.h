/*
 * A test double of the Kubernetes API server: a minimal HTTP/1.1 server on
 * 127.0.0.1 (ephemeral port) that plays a fixed script.  It is NOT an API
 * server: it knows nothing of Kubernetes; each test writes down exactly the
 * requests the client must make, in order, and the answers to give.  It is
 * strict: a request that differs from the next expected one (method, target
 * with query, required body fragments, content type, bearer token) or comes
 * after the script ends is answered 500 and fails the test at td_finish.
 *
 * One request per connection (answers carry "Connection: close").  Bodies
 * are sent with Content-Length, or as chunked transfer encoding, one HTTP
 * chunk per element of `chunks` with a short pause between them, so lines
 * split across chunks reach the client in pieces.
 */
#ifndef GPUFRAC_TESTS_KUBE_APIDOUBLE_H
#define GPUFRAC_TESTS_KUBE_APIDOUBLE_H

#include <stdbool.h>
#include <stddef.h>

#define TD_MAX_HAS 4
#define TD_MAX_CHUNKS 16

typedef struct td_expect {
  const char *method;
  const char *target;                /* path and query, exactly */
  const char *body_has[TD_MAX_HAS];  /* fragments the request body must hold */
  const char *ctype;                 /* expected Content-Type, or NULL */
  const char *token;                 /* expected bearer token, or NULL */
  int status;                        /* response status */
  const char *body;                  /* response body (Content-Length) */
  const char *chunks[TD_MAX_CHUNKS]; /* or: chunked response, NULL-ended */
  bool hold; /* after the chunks, keep the stream open until the client
                closes it or the double stops */
  bool cut;  /* after the chunks, close without the final chunk */
} td_expect;

typedef struct td_server td_server;

/* Starts the double on its own thread; the script is borrowed. */
td_server *td_start(const td_expect *script, size_t n);
/* "http://127.0.0.1:PORT" */
const char *td_url(const td_server *s);
/* Requests answered so far. */
size_t td_served(td_server *s);
/* Stops the server and joins its thread.  Returns 0 when every expected
 * request came, in order, and nothing else; otherwise writes why to err. */
int td_finish(td_server *s, char *err, size_t cap);

#endif
