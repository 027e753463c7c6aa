/*
 * nic: VipOpenNic / VipCloseNic device names, VipQueryNic values,
 * VipQuerySystemManagementInfo, VipErrorCallback and the name service
 * (docs/VIPL.md "NIC" and "Name service").
 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_attrs(VIP_NIC_HANDLE nic)
{
    VIP_NIC_ATTRIBUTES a;
    memset(&a, 0xEE, sizeof a);
    CHECK_OK(VipQueryNic(nic, &a));
    CHECK_MSG(memchr(a.Name, 0, sizeof a.Name) != NULL, "Name is not NUL-terminated");
    CHECK_MSG(strcmp(a.Name, "shm0") == 0, "Name is \"%s\", expected \"shm0\"", a.Name);
    CHECK_EQ(a.ThreadSafe, VIP_TRUE);
    CHECK_EQ(a.NicAddressLen, 4);
    CHECK(a.LocalNicAddress != NULL);
    CHECK_MSG(memcmp(a.LocalNicAddress, h_loopback, 4) == 0,
              "LocalNicAddress is %u.%u.%u.%u, expected 127.0.0.1", a.LocalNicAddress[0],
              a.LocalNicAddress[1], a.LocalNicAddress[2], a.LocalNicAddress[3]);
    CHECK_EQ(a.MaxDiscriminatorLen, 64);
    CHECK_EQ(a.MaxTransferSize, 4UL * 1024 * 1024);
    CHECK_EQ(a.NativeMTU, 4UL * 1024 * 1024);
    CHECK_EQ(a.MaxDescriptorsPerQueue, 4096);
    CHECK_EQ(a.MaxSegmentsPerDesc, 16);
    CHECK_EQ(a.MaxCQEntries, 65536);
    CHECK_EQ(a.MaxPtags, 1024);
    CHECK_EQ(a.MaxRegisterRegions, 65536);
    CHECK_EQ(a.ReliabilityLevelSupport, VIP_SERVICE_UNRELIABLE | VIP_SERVICE_RELIABLE_DELIVERY |
                                            VIP_SERVICE_RELIABLE_RECEPTION);
    CHECK_EQ(a.RDMAReadSupport, 0);
}

static void test_open_names(void)
{
    static const char *good[] = {NULL, "", "shm", "shm0"};
    static const char *bad[] = {"shm1", "bogus", "SHM0", "shm0x", "shm ", "libfabric"};
    VIP_NIC_HANDLE nic;
    /* The run's own choice (vipl_fabric/nic sets one) is put back at the end. */
    char *saved_prov = getenv("SOVIA_PROVIDER"), *saved_dev = getenv("SOVIA_VIPL_DEVICE");
    saved_prov = saved_prov ? strdup(saved_prov) : NULL;
    saved_dev = saved_dev ? strdup(saved_dev) : NULL;

    unsetenv("SOVIA_PROVIDER");
    unsetenv("SOVIA_VIPL_DEVICE");
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        nic = NULL;
        CHECK_MSG(VipOpenNic(good[i], &nic) == VIP_SUCCESS, "VipOpenNic(%s%s%s) failed",
                  good[i] ? "\"" : "", good[i] ? good[i] : "NULL", good[i] ? "\"" : "");
        CHECK(nic != NULL);
        check_attrs(nic);
        CHECK_OK(VipCloseNic(nic));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        VIP_RETURN r = VipOpenNic(bad[i], &nic);
        CHECK_MSG(r == VIP_INVALID_PARAMETER,
                  "VipOpenNic(\"%s\") returned %s, expected VIP_INVALID_PARAMETER", bad[i],
                  VipxReturnString(r));
    }

    /* SOVIA_VIPL_DEVICE overrides a NULL or empty name, not an explicit one. */
    CHECK(setenv("SOVIA_VIPL_DEVICE", "bogus", 1) == 0);
    CHECK_RET(VipOpenNic(NULL, &nic), VIP_INVALID_PARAMETER);
    CHECK_RET(VipOpenNic("", &nic), VIP_INVALID_PARAMETER);
    CHECK_OK(VipOpenNic("shm0", &nic));
    check_attrs(nic);
    CHECK_OK(VipCloseNic(nic));
    CHECK(setenv("SOVIA_VIPL_DEVICE", "shm", 1) == 0);
    CHECK_OK(VipOpenNic(NULL, &nic));
    check_attrs(nic);
    CHECK_OK(VipCloseNic(nic));
    CHECK(setenv("SOVIA_VIPL_DEVICE", "shm0", 1) == 0);
    CHECK_OK(VipOpenNic("", &nic));
    CHECK_OK(VipCloseNic(nic));

    /* SOVIA_PROVIDER is the documented name and wins over the old one. */
    CHECK(setenv("SOVIA_PROVIDER", "bogus", 1) == 0);
    CHECK_RET(VipOpenNic(NULL, &nic), VIP_INVALID_PARAMETER);
    CHECK(setenv("SOVIA_PROVIDER", "shm", 1) == 0);
    CHECK(setenv("SOVIA_VIPL_DEVICE", "bogus", 1) == 0);
    CHECK_OK(VipOpenNic(NULL, &nic));
    CHECK_OK(VipCloseNic(nic));
    CHECK(setenv("SOVIA_PROVIDER", "", 1) == 0); /* empty: not set */
    CHECK_RET(VipOpenNic(NULL, &nic), VIP_INVALID_PARAMETER);

    unsetenv("SOVIA_PROVIDER");
    unsetenv("SOVIA_VIPL_DEVICE");
    if (saved_prov)
        setenv("SOVIA_PROVIDER", saved_prov, 1);
    if (saved_dev)
        setenv("SOVIA_VIPL_DEVICE", saved_dev, 1);
    free(saved_prov);
    free(saved_dev);
}

static void test_independent_instances(void)
{
    VIP_NIC_HANDLE a = NULL, b = NULL;
    CHECK_OK(VipOpenNic("shm0", &a));
    CHECK_OK(VipOpenNic("shm0", &b));
    CHECK(a != NULL && b != NULL);
    CHECK_MSG(a != b, "two opens returned the same handle");

    /* Objects of one instance live on after the other is closed. */
    VIP_PROTECTION_HANDLE tb = h_ptag(b);
    CHECK_OK(VipCloseNic(a));
    check_attrs(b);
    VIP_PROTECTION_HANDLE tb2 = h_ptag(b);
    CHECK_OK(VipDestroyPtag(b, tb2));
    CHECK_OK(VipDestroyPtag(b, tb));
    CHECK_OK(VipCloseNic(b));
}

static void test_misc(void)
{
    VIP_NIC_HANDLE nic = NULL;
    CHECK_OK(VipOpenNic(NULL, &nic));

    VIP_AUTODISCOVERY_LIST list;
    memset(&list, 0, sizeof list);
    CHECK_RET(VipQuerySystemManagementInfo(nic, VIP_SMI_AUTODISCOVERY, &list),
              VIP_ERROR_NOT_SUPPORTED);

    h_errlog log;
    h_errlog_install(nic, &log);
    CHECK_EQ(h_errlog_count(&log), 0);
    CHECK_OK(VipErrorCallback(nic, NULL, NULL)); /* back to the default handler */
    CHECK_OK(VipCloseNic(nic));
    pthread_mutex_destroy(&log.mu);
}

/* Does `name` resolve (at some index) to 127.0.0.1? */
static int resolves_to_loopback(VIP_NIC_HANDLE nic, const char *name)
{
    VIP_NET_ADDRESS *a = h_addr_room();
    char copy[256];
    snprintf(copy, sizeof copy, "%s", name);
    int found = 0;
    for (VIP_ULONG i = 0; i < 16 && !found; i++) {
        a->HostAddressLen = 0;
        a->DiscriminatorLen = 99;
        VIP_RETURN r = VipNSGetHostByName(nic, copy, a, i);
        if (r == VIP_ERROR_NAMESERVICE)
            break;
        CHECK_OK(r);
        CHECK_EQ(a->HostAddressLen, 4);
        CHECK_EQ(a->DiscriminatorLen, 0);
        found = memcmp(a->HostAddress, h_loopback, 4) == 0;
    }
    free(a);
    return found;
}

static void test_name_service(void)
{
    VIP_NIC_HANDLE nic = NULL;
    CHECK_OK(VipOpenNic(NULL, &nic));
    CHECK_OK(VipNSInit(nic, NULL));

    VIP_NET_ADDRESS *a = h_addr_room();
    char localhost[] = "localhost";
    a->HostAddressLen = 0;
    a->DiscriminatorLen = 99;
    CHECK_OK(VipNSGetHostByName(nic, localhost, a, 0));
    CHECK_EQ(a->HostAddressLen, 4);
    CHECK_EQ(a->DiscriminatorLen, 0);
    CHECK_MSG(memcmp(a->HostAddress, h_loopback, 4) == 0,
              "localhost resolved to %u.%u.%u.%u, expected 127.0.0.1", a->HostAddress[0],
              a->HostAddress[1], a->HostAddress[2], a->HostAddress[3]);

    char literal[] = "127.0.0.1";
    memset(a->HostAddress, 0, 4);
    CHECK_OK(VipNSGetHostByName(nic, literal, a, 0));
    CHECK_EQ(a->HostAddressLen, 4);
    CHECK_EQ(a->DiscriminatorLen, 0);
    CHECK(memcmp(a->HostAddress, h_loopback, 4) == 0);

    /* No such name; no such index. */
    char unknown[] = "no-such-host.invalid";
    CHECK_RET(VipNSGetHostByName(nic, unknown, a, 0), VIP_ERROR_NAMESERVICE);
    CHECK_RET(VipNSGetHostByName(nic, localhost, a, 1000), VIP_ERROR_NAMESERVICE);

    /* Reverse lookup of 127.0.0.1. */
    VIP_NET_ADDRESS *lo = h_addr_room();
    lo->HostAddressLen = 4;
    lo->DiscriminatorLen = 0;
    memcpy(lo->HostAddress, h_loopback, 4);
    char name[256];
    memset(name, 'X', sizeof name);
    VIP_ULONG len = sizeof name;
    CHECK_OK(VipNSGetHostByAddr(nic, lo, name, &len));
    CHECK_MSG(memchr(name, 0, sizeof name) != NULL, "host name is not NUL-terminated");
    size_t n = strlen(name);
    CHECK_MSG(n > 0, "empty host name for 127.0.0.1");
    h_log("127.0.0.1 is \"%s\"", name);
    CHECK_MSG(resolves_to_loopback(nic, name), "\"%s\" does not resolve back to 127.0.0.1",
              name);

    /* Too small a buffer: nothing fits, and room for the name without its NUL. */
    char small[256];
    len = 1;
    CHECK_RET(VipNSGetHostByAddr(nic, lo, small, &len), VIP_INVALID_PARAMETER);
    len = (VIP_ULONG)n;
    CHECK_RET(VipNSGetHostByAddr(nic, lo, small, &len), VIP_INVALID_PARAMETER);
    len = (VIP_ULONG)n + 1;
    CHECK_OK(VipNSGetHostByAddr(nic, lo, small, &len));
    CHECK_MSG(strcmp(small, name) == 0, "exact-size lookup gave \"%s\", expected \"%s\"",
              small, name);

    CHECK_OK(VipNSShutdown(nic));
    CHECK_OK(VipCloseNic(nic));
    free(a);
    free(lo);
}

int main(void)
{
    h_init("nic", 30);
    test_open_names();
    test_independent_instances();
    test_misc();
    test_name_service();
    h_pass();
}
