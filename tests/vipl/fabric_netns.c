/*
 * fabric_netns: one end of a VI between two network namespaces
 * (test_fabric_netns.py makes them, joined by a veth pair). Usage:
 *   test_vipl_fabric_netns server|client <IPv4 of the server> <discriminator>
 * The client sends messages of 0 B to 64 KiB with immediate data, the
 * server echoes each, the client checks every byte and disconnects; the
 * server then sees its VI leave CONNECTED. Over SOVIA_PROVIDER (fabric:tcp).
 */
#include "harness.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

static const VIP_UINT32 sizes[] = {0, 1, 4, 1000, 4096, 65536, 65536, 7};
#define NMSG (sizeof sizes / sizeof sizes[0])
#define MAXMSG 65536

int main(int argc, char **argv)
{
    h_init("fabric_netns", 30);
    CHECK_MSG(argc == 4, "usage: %s server|client ADDRESS DISCRIMINATOR", argv[0]);
    int server = strcmp(argv[1], "server") == 0;
    VIP_UINT8 host[4];
    CHECK(inet_pton(AF_INET, argv[2], host) == 1);
    VIP_NET_ADDRESS *addr = VipxAllocNetAddress(host, 4, argv[3], (VIP_UINT16)strlen(argv[3]));
    VIP_NET_ADDRESS *mine = VipxAllocNetAddress(host, 4, "client", 6);
    VIP_NET_ADDRESS *remote = h_addr_room();
    CHECK(addr && mine);
    VIP_NIC_HANDLE nic = h_open_nic();
    VIP_PROTECTION_HANDLE t = h_ptag(nic);
    VIP_VI_ATTRIBUTES va = h_vi_attrs(t, VIP_SERVICE_RELIABLE_DELIVERY);
    VIP_VI_HANDLE vi = h_vi(nic, &va, NULL, NULL, 0, 0, 0);
    h_mem rbuf = h_mem_alloc(nic, t, NMSG * MAXMSG, 0), sbuf = h_mem_alloc(nic, t, MAXMSG, 0);
    h_descs d = h_descs_alloc(nic, t, NMSG + 1);
    for (unsigned i = 0; i < NMSG; i++)
        h_post_recv1(vi, &d, i, rbuf.ptr + (size_t)i * MAXMSG, rbuf.mh, MAXMSG);
    if (server) {
        VIP_CONN_HANDLE conn;
        VIP_VI_ATTRIBUTES ra;
        CHECK_OK(VipConnectWait(nic, addr, 20000, remote, &ra, &conn));
        CHECK_EQ(remote->HostAddressLen, 4);
        CHECK_OK(VipConnectAccept(conn, vi));
        for (unsigned i = 0; i < NMSG; i++) {
            VIP_DESCRIPTOR *x = h_recv_wait(vi, 10000);
            CHECK(x == h_desc(&d, i));
            CHECK_STATUS(x, VIP_STATUS_DONE | VIP_STATUS_OP_RECEIVE | VIP_STATUS_IMMEDIATE);
            CHECK_EQ(x->CS.Length, sizes[i]);
            CHECK_EQ(x->CS.ImmediateData, 0xabc000u + i);
            memcpy(sbuf.ptr, rbuf.ptr + (size_t)i * MAXMSG, sizes[i]);
            h_post_send1(vi, &d, NMSG, sbuf.ptr, sbuf.mh, sizes[i], VIP_CONTROL_IMMEDIATE,
                         0xdef000u + i);
            CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
        }
        /* The client disconnects: our VI leaves CONNECTED within 2 s. */
        double t0 = h_now_ms();
        while (h_vi_state(vi) == VIP_STATE_CONNECTED && h_now_ms() - t0 < 2000)
            h_sleep_ms(5);
        CHECK_EQ(h_vi_state(vi), VIP_STATE_ERROR);
        h_log("server: %u messages echoed, the client's end seen after %.0f ms", (unsigned)NMSG,
              h_now_ms() - t0);
    } else {
        double t0 = h_now_ms();
        VIP_RETURN r;
        while ((r = VipConnectRequest(vi, mine, addr, 10000, NULL)) == VIP_NO_MATCH &&
               h_now_ms() - t0 < 10000)
            h_sleep_ms(20);
        CHECK_RET(r, VIP_SUCCESS);
        for (unsigned i = 0; i < NMSG; i++) {
            h_fill_random(sbuf.ptr, sizes[i], 100 + i);
            h_post_send1(vi, &d, NMSG, sbuf.ptr, sbuf.mh, sizes[i], VIP_CONTROL_IMMEDIATE,
                         0xabc000u + i);
            CHECK_STATUS(h_send_done(vi), VIP_STATUS_DONE | VIP_STATUS_OP_SEND);
            VIP_DESCRIPTOR *x = h_recv_wait(vi, 10000);
            CHECK(x == h_desc(&d, i));
            CHECK_EQ(x->CS.Length, sizes[i]);
            CHECK_EQ(x->CS.ImmediateData, 0xdef000u + i);
            CHECK_RANDOM(rbuf.ptr + (size_t)i * MAXMSG, sizes[i], 100 + i);
        }
        CHECK_OK(VipDisconnect(vi));
        h_log("client: %u messages echoed byte-exact", (unsigned)NMSG);
    }
    h_vi_teardown(vi);
    h_mem_free(&rbuf);
    h_mem_free(&sbuf);
    h_descs_free(&d);
    CHECK_OK(VipDestroyPtag(nic, t));
    CHECK_OK(VipCloseNic(nic));
    free(addr);
    free(mine);
    free(remote);
    h_pass();
}
