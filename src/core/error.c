#include "gpufrac/error.h"

const char *gf_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define GF__ERR_MSG(name, num, msg)                                            \
  case GF_E##name:                                                             \
    return msg;
    GF_ERRNO_MAP(GF__ERR_MSG)
#undef GF__ERR_MSG
  default:
    return "unknown error";
  }
}

const char *gf_err_name(int err) {
  switch (err) {
  case 0:
    return "GF_OK";
#define GF__ERR_NAME(name, num, msg)                                           \
  case GF_E##name:                                                             \
    return "GF_E" #name;
    GF_ERRNO_MAP(GF__ERR_NAME)
#undef GF__ERR_NAME
  default:
    return "GF_EUNKNOWN";
  }
}
