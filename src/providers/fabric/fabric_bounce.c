/*
 * fabric_bounce.c - descriptors with more segments than the provider
 * takes in one operation (tcp: 4) go through a bounce buffer of their
 * own: a send's segments are gathered into it at the post, a receive's
 * bytes are scattered from it at its completion. The buffer is registered
 * where the provider needs local registration (FI_MR_LOCAL).
 */
#include <stdlib.h>
#include <string.h>

#include "fabric.h"

int fab_bounce_take(struct fab_nic *fn, struct fab_slot *s, bool gather)
{
    size_t total = 0;
    for (uint32_t i = 0; i < s->nsge; i++)
        total += s->iov[i].iov_len;
    s->bounce = calloc(1, total ? total : 1);
    if (!s->bounce)
        return -1;
    s->bounce_mr = NULL;
    s->bounce_desc = NULL;
    if (fn->mr_local) {
        if (fi_mr_reg(s->q->vi->domain, s->bounce, total ? total : 1, FI_SEND | FI_RECV, 0, 0, 0,
                      &s->bounce_mr, NULL) != 0) {
            free(s->bounce);
            s->bounce = NULL;
            return -1;
        }
        s->bounce_desc = fi_mr_desc(s->bounce_mr);
    }
    if (gather) {
        size_t off = 0;
        for (uint32_t i = 0; i < s->nsge; i++) {
            memcpy((char *)s->bounce + off, s->iov[i].iov_base, s->iov[i].iov_len);
            off += s->iov[i].iov_len;
        }
    }
    s->bounce_iov = (struct iovec){s->bounce, total};
    return 0;
}

void fab_bounce_done(struct fab_slot *s, uint32_t len, bool scatter)
{
    if (!s->bounce)
        return;
    if (scatter) {
        if (len > s->bounce_iov.iov_len)
            len = (uint32_t)s->bounce_iov.iov_len;
        size_t off = 0;
        for (uint32_t i = 0; i < s->nsge && off < len; i++) {
            size_t n = s->iov[i].iov_len < len - off ? s->iov[i].iov_len : len - off;
            memcpy(s->iov[i].iov_base, (char *)s->bounce + off, n);
            off += n;
        }
    }
    if (s->bounce_mr)
        fi_close(&s->bounce_mr->fid);
    free(s->bounce);
    s->bounce = NULL;
    s->bounce_mr = NULL;
}

void fab_slot_iov(struct fab_slot *s, struct iovec **iov, void ***desc, size_t *count)
{
    if (s->bounce) {
        *iov = &s->bounce_iov;
        *desc = &s->bounce_desc;
        *count = 1;
    } else {
        *iov = s->iov;
        *desc = s->mrdesc;
        *count = s->nsge;
    }
}
