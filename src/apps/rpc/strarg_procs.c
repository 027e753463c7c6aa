/*
 * strarg_procs.c - the server's remote procedures, called by the dispatch
 * function rpcgen generates (strarg_svc.c in the build directory). rpcgen's
 * default (non-MT) style returns results in static storage; the server is
 * single-threaded.
 */
#include <string.h>

#include "strarg.h"
#include "strarg_data.h"

int *strarg_null_1_svc(void *arg, struct svc_req *req)
{
    static int result;
    (void)arg;
    (void)req;
    result = 0;
    return &result;
}

int *strarg_len_1_svc(strarg *arg, struct svc_req *req)
{
    static int result;
    (void)req;
    result = (int)strlen(*arg);
    return &result;
}

int *strarg_sum_1_svc(strarg *arg, struct svc_req *req)
{
    static int result;
    (void)req;
    result = (int)strarg_fnv1a(*arg, strlen(*arg));
    return &result;
}
