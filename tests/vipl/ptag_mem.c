/*
 * ptag_mem: protection tags and memory registration (docs/VIPL.md
 * "Protection tags and memory").
 */
#include "harness.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static unsigned char static_buf[3000];

static void check_mem_attrs(VIP_NIC_HANDLE nic, void *addr, VIP_MEM_HANDLE mh,
                            VIP_PROTECTION_HANDLE ptag, VIP_BOOLEAN rdmaw)
{
    VIP_MEM_ATTRIBUTES a;
    memset(&a, 0xEE, sizeof a);
    CHECK_OK(VipQueryMem(nic, addr, mh, &a));
    CHECK_MSG(a.Ptag == ptag, "VipQueryMem: Ptag %p, expected %p", a.Ptag, ptag);
    CHECK_EQ(a.EnableRdmaWrite, rdmaw);
    CHECK_EQ(a.EnableRdmaRead, VIP_FALSE);
}

static void test_ptags(VIP_NIC_HANDLE nic)
{
    VIP_PROTECTION_HANDLE t1 = h_ptag(nic), t2 = h_ptag(nic);
    CHECK(t1 != NULL && t2 != NULL);
    CHECK_MSG(t1 != t2, "two ptags share a handle");
    CHECK_OK(VipDestroyPtag(nic, t2));

    /* In use by a memory region. */
    h_mem m = h_mem_alloc(nic, t1, 4096, 0);
    CHECK_RET(VipDestroyPtag(nic, t1), VIP_INVALID_STATE);
    h_mem_free(&m);

    /* In use by a VI. */
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t1, VIP_SERVICE_UNRELIABLE);
    VIP_VI_HANDLE vi = NULL;
    CHECK_OK(VipCreateVi(nic, &va, NULL, NULL, &vi));
    CHECK_RET(VipDestroyPtag(nic, t1), VIP_INVALID_STATE);

    /* Moving the VI to another tag frees the first one and pins the second. */
    VIP_PROTECTION_HANDLE t3 = h_ptag(nic);
    va.Ptag = t3;
    CHECK_OK(VipSetViAttributes(vi, &va));
    CHECK_OK(VipDestroyPtag(nic, t1));
    CHECK_RET(VipDestroyPtag(nic, t3), VIP_INVALID_STATE);
    CHECK_OK(VipDestroyVi(vi));
    CHECK_OK(VipDestroyPtag(nic, t3));

    /* Both in use: still refused after one user goes. */
    VIP_PROTECTION_HANDLE t4 = h_ptag(nic);
    h_mem m2 = h_mem_alloc(nic, t4, 64, 0);
    va.Ptag = t4;
    CHECK_OK(VipCreateVi(nic, &va, NULL, NULL, &vi));
    CHECK_RET(VipDestroyPtag(nic, t4), VIP_INVALID_STATE);
    CHECK_OK(VipDestroyVi(vi));
    CHECK_RET(VipDestroyPtag(nic, t4), VIP_INVALID_STATE);
    h_mem_free(&m2);
    CHECK_OK(VipDestroyPtag(nic, t4));
}

static void test_register_errors(VIP_NIC_HANDLE nic, VIP_NIC_HANDLE other)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    unsigned char *buf = aligned_alloc(64, 4096);
    CHECK(buf != NULL);
    VIP_MEM_ATTRIBUTES a = {t, VIP_FALSE, VIP_FALSE};
    VIP_MEM_HANDLE mh;

    CHECK_RET(VipRegisterMem(nic, NULL, 4096, &a, &mh), VIP_INVALID_PARAMETER);
    CHECK_RET(VipRegisterMem(nic, buf, 0, &a, &mh), VIP_INVALID_PARAMETER);
    CHECK_RET(VipRegisterMem(nic, buf, 4096, NULL, &mh), VIP_INVALID_PARAMETER);

    /* Unknown tags: NULL, another NIC instance's tag, a destroyed tag. */
    VIP_PROTECTION_HANDLE foreign = h_ptag(other);
    VIP_PROTECTION_HANDLE dead = h_ptag(nic);
    CHECK_OK(VipDestroyPtag(nic, dead));
    VIP_MEM_ATTRIBUTES bad = a;
    bad.Ptag = NULL;
    CHECK_RET(VipRegisterMem(nic, buf, 4096, &bad, &mh), VIP_INVALID_PTAG);
    bad.Ptag = foreign;
    CHECK_RET(VipRegisterMem(nic, buf, 4096, &bad, &mh), VIP_INVALID_PTAG);
    bad.Ptag = dead;
    CHECK_RET(VipRegisterMem(nic, buf, 4096, &bad, &mh), VIP_INVALID_PTAG);

    bad = a;
    bad.EnableRdmaRead = VIP_TRUE;
    CHECK_RET(VipRegisterMem(nic, buf, 4096, &bad, &mh), VIP_INVALID_RDMAREAD);
    bad.EnableRdmaWrite = VIP_TRUE;
    CHECK_RET(VipRegisterMem(nic, buf, 4096, &bad, &mh), VIP_INVALID_RDMAREAD);

    /* None of the failures registered anything: the tag is free to go. */
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipDestroyPtag(other, foreign));
    free(buf);
}

static void test_any_memory(VIP_NIC_HANDLE nic)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    unsigned char stack_buf[1000];
    unsigned char *heap = malloc(777);
    CHECK(heap != NULL);
    unsigned char *map = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    CHECK(map != MAP_FAILED);
    memset(stack_buf, 1, sizeof stack_buf);

    struct {
        void *addr;
        VIP_ULONG len;
        int rdmaw;
    } r[] = {
        {stack_buf + 3, 997, 0}, {static_buf + 1, 2999, 1}, {heap + 1, 776, 0},
        {map, 8192, 1},          {map + 5, 1, 0},             {heap, 1, 1},
    };
    VIP_MEM_HANDLE mh[6];
    for (int i = 0; i < 6; i++) {
        VIP_MEM_ATTRIBUTES a = {t, r[i].rdmaw ? VIP_TRUE : VIP_FALSE, VIP_FALSE};
        CHECK_OK(VipRegisterMem(nic, r[i].addr, r[i].len, &a, &mh[i]));
    }
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < i; j++)
            CHECK_MSG(mh[i] != mh[j], "regions %d and %d share handle 0x%x", i, j, mh[i]);
        check_mem_attrs(nic, r[i].addr, mh[i], t, r[i].rdmaw ? VIP_TRUE : VIP_FALSE);
    }
    for (int i = 0; i < 6; i++)
        CHECK_OK(VipDeregisterMem(nic, r[i].addr, mh[i]));
    CHECK_OK(VipDestroyPtag(nic, t));
    munmap(map, 8192);
    free(heap);
}

static void test_deregister_and_stale(VIP_NIC_HANDLE nic)
{
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    h_mem m = h_mem_alloc(nic, t, 4096, 0);
    h_mem m2 = h_mem_alloc(nic, t, 4096, 0);

    /* Only the registered start address deregisters. */
    CHECK_RET(VipDeregisterMem(nic, m.ptr + 1, m.mh), VIP_INVALID_PARAMETER);
    CHECK_RET(VipDeregisterMem(nic, m.ptr + 64, m.mh), VIP_INVALID_PARAMETER);
    CHECK_RET(VipDeregisterMem(nic, m2.ptr, m.mh), VIP_INVALID_PARAMETER);
    check_mem_attrs(nic, m.ptr, m.mh, t, VIP_FALSE); /* still registered */

    VIP_MEM_HANDLE old = m.mh;
    CHECK_OK(VipDeregisterMem(nic, m.ptr, m.mh));
    VIP_MEM_ATTRIBUTES qa;
    CHECK_NOT_OK(VipQueryMem(nic, m.ptr, old, &qa));
    CHECK_RET(VipDeregisterMem(nic, m.ptr, old), VIP_INVALID_PARAMETER);
    VIP_MEM_ATTRIBUTES sa = {t, VIP_TRUE, VIP_FALSE};
    CHECK_NOT_OK(VipSetMemAttributes(nic, m.ptr, old, &sa));

    /* Re-registering the same memory over and over never reuses a handle. */
    enum { ROUNDS = 200 };
    static VIP_MEM_HANDLE seen[ROUNDS + 1];
    seen[0] = old;
    for (int i = 1; i <= ROUNDS; i++) {
        VIP_MEM_ATTRIBUTES a = {t, VIP_FALSE, VIP_FALSE};
        VIP_MEM_HANDLE h;
        CHECK_OK(VipRegisterMem(nic, m.ptr, 4096, &a, &h));
        for (int j = 0; j < i; j++)
            CHECK_MSG(h != seen[j], "round %d: new handle 0x%x equals the stale handle of round %d",
                      i, h, j);
        /* Every stale handle stays invalid next to the live one. */
        CHECK_NOT_OK(VipQueryMem(nic, m.ptr, seen[i - 1], &qa));
        CHECK_RET(VipDeregisterMem(nic, m.ptr, seen[i - 1]), VIP_INVALID_PARAMETER);
        check_mem_attrs(nic, m.ptr, h, t, VIP_FALSE);
        CHECK_OK(VipDeregisterMem(nic, m.ptr, h));
        seen[i] = h;
    }
    m.mh = 0;
    free(m.ptr);
    m.ptr = NULL;

    /* m2 was never disturbed. */
    check_mem_attrs(nic, m2.ptr, m2.mh, t, VIP_FALSE);
    h_mem_free(&m2);
    CHECK_OK(VipDestroyPtag(nic, t));
}

static void test_query_set(VIP_NIC_HANDLE nic)
{
    VIP_PROTECTION_HANDLE t1 = h_ptag(nic), t2 = h_ptag(nic);
    h_mem m = h_mem_alloc(nic, t1, 8192, 0);
    check_mem_attrs(nic, m.ptr, m.mh, t1, VIP_FALSE);

    VIP_MEM_ATTRIBUTES a = {t1, VIP_TRUE, VIP_FALSE};
    CHECK_OK(VipSetMemAttributes(nic, m.ptr, m.mh, &a));
    check_mem_attrs(nic, m.ptr, m.mh, t1, VIP_TRUE);

    a.Ptag = t2;
    a.EnableRdmaWrite = VIP_FALSE;
    CHECK_OK(VipSetMemAttributes(nic, m.ptr, m.mh, &a));
    check_mem_attrs(nic, m.ptr, m.mh, t2, VIP_FALSE);

    /* The region now pins t2, not t1. */
    CHECK_OK(VipDestroyPtag(nic, t1));
    CHECK_RET(VipDestroyPtag(nic, t2), VIP_INVALID_STATE);
    h_mem_free(&m);
    CHECK_OK(VipDestroyPtag(nic, t2));
}

/* The advertised limits are usable: MaxPtags tags, MaxRegisterRegions regions. */
static void test_limits(VIP_NIC_HANDLE nic)
{
    VIP_NIC_ATTRIBUTES na;
    CHECK_OK(VipQueryNic(nic, &na));
    CHECK_EQ(na.MaxPtags, 1024);
    CHECK_EQ(na.MaxRegisterRegions, 65536);
    VIP_PROTECTION_HANDLE *tags = calloc(na.MaxPtags, sizeof *tags);
    CHECK(tags != NULL);
    for (VIP_ULONG i = 0; i < na.MaxPtags; i++) {
        VIP_RETURN r = VipCreatePtag(nic, &tags[i]);
        CHECK_MSG(r == VIP_SUCCESS, "ptag %lu of %lu: %s", i + 1, na.MaxPtags,
                  VipxReturnString(r));
    }
    for (VIP_ULONG i = 0; i < na.MaxPtags; i++)
        CHECK_OK(VipDestroyPtag(nic, tags[i]));
    free(tags);

    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    size_t n = na.MaxRegisterRegions;
    unsigned char *mem = aligned_alloc(64, n * 64);
    VIP_MEM_HANDLE *mh = calloc(n, sizeof *mh);
    CHECK(mem != NULL && mh != NULL);
    VIP_MEM_ATTRIBUTES a = {t, VIP_FALSE, VIP_FALSE};
    for (size_t i = 0; i < n; i++) {
        VIP_RETURN r = VipRegisterMem(nic, mem + 64 * i, 64, &a, &mh[i]);
        CHECK_MSG(r == VIP_SUCCESS, "region %zu of %zu: %s", i + 1, n, VipxReturnString(r));
    }
    check_mem_attrs(nic, mem + 64 * (n - 1), mh[n - 1], t, VIP_FALSE);
    for (size_t i = 0; i < n; i++)
        CHECK_OK(VipDeregisterMem(nic, mem + 64 * i, mh[i]));
    free(mh);
    free(mem);
    CHECK_OK(VipDestroyPtag(nic, t));
}

int main(void)
{
    h_init("ptag_mem", 30);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_NIC_HANDLE other = h_open_nic();
    test_ptags(nic);
    test_register_errors(nic, other);
    test_any_memory(nic);
    test_deregister_and_stale(nic);
    test_query_set(nic);
    test_limits(nic);
    CHECK_OK(VipCloseNic(other));
    CHECK_OK(VipCloseNic(nic));
    h_pass();
}
