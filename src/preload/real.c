/*
 * real.c - finds libc's own definitions of the interposed calls.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "preload.h"

struct real_libc real;

#define FIND(name) real.name = (__typeof__(real.name))dlsym(RTLD_NEXT, #name)

static void resolve_once(void)
{
    FIND(socket);
    FIND(connect);
    FIND(listen);
    FIND(accept);
    FIND(accept4);
    FIND(close);
    FIND(shutdown);
    FIND(readv);
    FIND(writev);
    FIND(write);
    FIND(send);
    FIND(sendto);
    FIND(sendmsg);
    FIND(recv);
    FIND(recvfrom);
    FIND(recvmsg);
    FIND(sendfile);
    FIND(splice);
    FIND(sendmmsg);
    FIND(recvmmsg);
    FIND(preadv2);
    FIND(pwritev2);
    FIND(dup);
    FIND(dup2);
    FIND(dup3);
    FIND(fcntl);
    FIND(ioctl);
    FIND(setsockopt);
    FIND(poll);
    FIND(ppoll);
    FIND(select);
    FIND(pselect);
    FIND(epoll_create);
    FIND(epoll_create1);
    FIND(epoll_ctl);
    FIND(epoll_wait);
    FIND(epoll_pwait);
    FIND(epoll_pwait2);
    FIND(fork);
    FIND(fdopen);
    FIND(syscall);
    FIND(read); /* last: preload_ready() tests it */
}

void preload_resolve(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, resolve_once);
}

__attribute__((constructor)) static void preload_init(void)
{
    preload_resolve();
}
