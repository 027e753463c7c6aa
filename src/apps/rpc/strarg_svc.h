/*
 * strarg_svc.h - the dispatch function `rpcgen -m` writes into strarg_svc.c
 * (build directory); rpcgen's header does not declare it.
 */
#ifndef STRARG_SVC_H
#define STRARG_SVC_H

#include <rpc/rpc.h>

void strarg_prog_1(struct svc_req *rqstp, SVCXPRT *transp);

#endif
