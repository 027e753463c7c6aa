/*
 * vipl_ext.h - sovia extensions to the VIA 1.0 VIPL interface.
 *
 * Everything here is optional: a plain VIPL program never needs it. The
 * extensions give a consumer control over per-VI resources (queue depth,
 * receive staging, a zero-copy receive arena), statistics and small helpers.
 * Every provider implements them; where a provider cannot, it answers
 * VIP_ERROR_NOT_SUPPORTED.
 */
#ifndef VIPL_EXT_H
#define VIPL_EXT_H

#include <pthread.h>
#include <sys/types.h>

#include <vipl.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Per-VI resources, fixed at creation. Zero in a field means the default.
 *
 * QueueDepth   descriptors each work queue holds (at most
 *              MaxDescriptorsPerQueue, rounded up to a power of two; default
 *              MaxDescriptorsPerQueue on shm, 256 on fabric).
 * StagingBytes receive staging area for receive buffers outside the arena
 *              (default: room for a full queue of receives of the VI's
 *              MaxTransferSize, up to the 1 GiB segment; shm); a receive
 *              posted when the area is full fails with VIP_ERROR_RESOURCE.
 * ArenaBytes   zero-copy receive arena (default 0: none). Receive buffers
 *              placed inside it are written by the sender directly; see
 *              VipxViArena.
 * Flags        VIPX_VI_INHERITABLE: the VI keeps what VipxViExport needs
 *              (the shm provider: six more descriptors per connection).
 */
#define VIPX_VI_INHERITABLE 1u

typedef struct {
    VIP_ULONG QueueDepth;
    VIP_ULONG StagingBytes;
    VIP_ULONG ArenaBytes;
    VIP_ULONG Flags;
} VIPX_VI_CONFIG;

VIP_RETURN VipxCreateVi(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                        VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                        const VIPX_VI_CONFIG *Config, VIP_VI_HANDLE *ViHandle);

/*
 * The VI's zero-copy receive arena: memory owned by the VI, valid until
 * VipDestroyVi. Register it (or parts of it) with VipRegisterMem like any
 * other memory; receive descriptors whose segments all lie inside it are
 * filled by the peer without an intermediate copy, and regions inside it
 * registered with EnableRdmaWrite are the VI's RDMA write targets.
 */
VIP_RETURN VipxViArena(VIP_VI_HANDLE ViHandle, VIP_PVOID *Base, VIP_ULONG *Length);

typedef struct {
    VIP_UINT64 SendsPosted;
    VIP_UINT64 SendsCompleted;
    VIP_UINT64 RecvsPosted;
    VIP_UINT64 RecvsCompleted;
    VIP_UINT64 BytesSent;
    VIP_UINT64 BytesReceived;
    VIP_UINT64 RdmaWrites;
    VIP_UINT64 DroppedNoRecv;   /* unreliable sends dropped: no receive posted */
    VIP_UINT64 StagedRecvs;     /* receives that went through the staging area */
    VIP_UINT64 PeerProtocolErrors; /* invalid values read from the peer */
    VIP_UINT64 PeerClosed; /* 1: the connection ended because every process on the
                            * other side closed it or exited (no error reported) */
} VIPX_VI_STATS;

VIP_RETURN VipxQueryViStats(VIP_VI_HANDLE ViHandle, VIPX_VI_STATS *Stats);

/*
 * A connection token: a descriptor the requester holds, sent with the
 * VI's next VipConnectRequest (the shm provider passes it over its Unix
 * socket, SCM_RIGHTS), so the listener can check something only the
 * requester could give, e.g. that it owns a given kernel socket. The VI
 * keeps a duplicate of Fd until that request returns; -1 sends none.
 * The accepting side takes the token of a pending request (-1: none) with
 * VipxConnToken before VipConnectAccept or VipConnectReject, and owns it.
 * A child it forks has no copy of a received token (closed in the child,
 * whether taken or not: a copy would hold the requester's socket open).
 */
VIP_RETURN VipxViSetConnectToken(VIP_VI_HANDLE ViHandle, int Fd);

/*
 * VipConnectRequest in two steps, for a requester that must not wait for
 * the listener's answer: VipxConnectStart sends the request (token and
 * user as for VipConnectRequest) and returns, the VI CONNECT_PENDING;
 * VipxConnectDone waits up to Timeout ms (0: only looks) for the answer:
 * VIP_TIMEOUT while there is none (still pending), else what
 * VipConnectRequest would have returned (the VI IDLE again unless
 * VIP_SUCCESS). VipxConnectAbandon gives a pending request up (IDLE; the
 * listener sees the requester go). VIP_ERROR_NOT_SUPPORTED from the start: the
 * provider has only VipConnectRequest (fabric).
 */
VIP_RETURN VipxConnectStart(VIP_VI_HANDLE ViHandle, VIP_NET_ADDRESS *LocalAddr,
                            VIP_NET_ADDRESS *RemoteAddr);
VIP_RETURN VipxConnectDone(VIP_VI_HANDLE ViHandle, VIP_ULONG Timeout,
                           VIP_VI_ATTRIBUTES *RemoteViAttribs);
VIP_RETURN VipxConnectAbandon(VIP_VI_HANDLE ViHandle);
/* Whether requests to LocalAddr, which this process listens on, wait to be
 * taken by VipConnectWait (VIP_SUCCESS) or not (VIP_NOT_DONE): a request
 * started before something else the listening side sees (a kernel
 * connection) is known to be coming. */
VIP_RETURN VipxListenWaiting(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr);
VIP_RETURN VipxConnToken(VIP_CONN_HANDLE ConnHandle, int *Fd);

/*
 * Users. A listener's name carries the effective uid of the process that
 * listens, and a VipConnectRequest dials the name of the user set with
 * VipxViSetConnectUser for the VI ((uid_t)-1, the default: our own
 * effective uid) and talks only to a socket of that user (SO_PEERCRED).
 * A listener takes requests of its own user only, unless started with
 * VipxListenAnyUser; then VipxConnPeerUser says who asks (the requester's
 * effective uid, and whether that is another user than we are now) and
 * the accepting side decides. A connection between two users ("foreign":
 * the other process's current credentials are not all ours, checked on
 * both sides) shares nothing but that connection's own segments: no
 * completion queue's page or socket changes hands, the peer of a CQ reads
 * the VI's own armed word and wakes the CQ by its socket's name (as a
 * holder since a fork is woken), and a connect token is never sent as it
 * is but inside an epoll instance that watches it (the
 * listener learns which socket it is, from /proc/self/fdinfo, and cannot
 * use it). docs/SECURITY.md, "Another user".
 */
VIP_RETURN VipxViSetConnectUser(VIP_VI_HANDLE ViHandle, uid_t Uid);
VIP_RETURN VipxListenAnyUser(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr);
VIP_RETURN VipxConnPeerUser(VIP_CONN_HANDLE ConnHandle, uid_t *Uid, VIP_BOOLEAN *Foreign);

/*
 * How long VipSendWait, VipRecvWait and VipCQWait poll before they sleep,
 * in microseconds, for every queue of the NIC. Spinning for about what a
 * sleep and wake-up costs bounds the waiter's time at twice the best
 * possible while leaving an idle waiter asleep. Default 20 (environment:
 * SOVIA_VIPL_SPIN_US); 0 sleeps at once.
 */
VIP_RETURN VipxSetWaitSpin(VIP_NIC_HANDLE NicHandle, VIP_ULONG Microseconds);

/*
 * Waiting on a CQ together with other descriptors (poll, epoll):
 * VipxCQPollFds gives two descriptors to poll for POLLIN: the CQ's, readable
 * when a completion may have arrived while the CQ is armed, and the calling
 * thread's own doorbell (-1 if it has none), and the longest one poll may
 * last (ms, -1: no limit): short when a wake-up may be lost (no doorbell),
 * 100 for an inheritable CQ, whose armed page a peer could write.
 * Arm, check for completions, poll, then disarm:
 *     VipxCQArm(cq, VIP_TRUE); if (nothing ready) poll(...); VipxCQArm(cq, VIP_FALSE);
 * The disarm drains the CQ's descriptor and rings the doorbells of the
 * process's other sleeping threads, so a wake-up one thread takes reaches
 * the others. Arms count (several threads may arm at once): pair each arm
 * with one disarm, in the same thread; a disarm with nothing armed does
 * nothing. VipxCQDisarmQuiet disarms without draining, for a caller that
 * did not sleep, or whose poll did not report the CQ's descriptor readable:
 * a byte that came meanwhile makes the next poll return at once, and that
 * sleep's disarm takes it (one system call less per wait on a busy CQ).
 * VipxCQWaitFd gives the CQ's descriptor alone (a single waiting
 * thread needs nothing else). VipxWakeWaiters rings every sleeping thread
 * of the process (a library's own threads telling its waiters to look).
 */
VIP_RETURN VipxCQWaitFd(VIP_CQ_HANDLE CQHandle, int *Fd);
VIP_RETURN VipxCQPollFds(VIP_CQ_HANDLE CQHandle, int Fds[2], int *MaxSleepMs);
VIP_RETURN VipxCQArm(VIP_CQ_HANDLE CQHandle, VIP_BOOLEAN Arm);
VIP_RETURN VipxCQDisarmQuiet(VIP_CQ_HANDLE CQHandle);
VIP_RETURN VipxWakeWaiters(void);

/*
 * Readiness hints, for a waiter over many VIs that wants to look at those
 * with news rather than at every one (docs/ARCHITECTURE.md, "Readiness
 * hints"). VipxViHintCookie names a VI for VipxCQHints (NULL: never
 * reported). VipxCQHints takes, test-and-clear, the cookies of the CQ's
 * VIs whose peer hinted a completion since the last call; a hint is only
 * a reason to look (the peer may set it for nothing, or withhold it), so
 * the waiter must still look at every VI now and then. VIP_ERROR_RESOURCE:
 * more than Max were hinted (Max reported): look at every VI.
 * VIP_ERROR_NOT_SUPPORTED: the provider has none. VipxViHinted: whether
 * the VI's peer hints at all (VIP_FALSE: look at it every time).
 */
VIP_RETURN VipxViHintCookie(VIP_VI_HANDLE ViHandle, VIP_PVOID Cookie);
VIP_RETURN VipxCQHints(VIP_CQ_HANDLE CQHandle, VIP_PVOID *Cookies, VIP_ULONG Max,
                       VIP_ULONG *Count);
VIP_BOOLEAN VipxViHinted(VIP_VI_HANDLE ViHandle);

/*
 * A futex sleep on a few VIs' own words, for a thread that waits for those
 * VIs only and has no kernel descriptor to poll (the shm provider: the peer
 * wakes it with one FUTEX_WAKE instead of a datagram to the CQ's
 * descriptor, which the sleeper would then drain). The VIs stay on their
 * CQ; the CQ is not armed for this sleep.
 *     VipxSleepArm(&w[0]);                  the thread: counted asleep
 *     VipxViSleepArm(vi, VIP_TRUE, &w[i], &bound) for each VI
 *     look for work; if none: VipxSleepWords(w, n, ms) (ms within bound)
 *     VipxViSleepArm(vi, VIP_FALSE, NULL, NULL) for each; VipxSleepDisarm()
 * VipxSleepWords returns VIP_SUCCESS on a wake-up, a signal, or a word
 * that changed since its arm (look again), VIP_TIMEOUT at the end of `ms`
 * (-1: an hour). The peer can write a VI's word, so a wake-up proves
 * nothing: look at the real condition; and, for an inheritable VI, the
 * count it reads: the arm's bound (100 ms) then applies. A thread's own
 * word is rung by VipxWakeWaiters, and by VipxWakeSelf, which a signal
 * handler may call (async-signal-safe) so that a sleep it interrupts, or
 * is about to begin, ends. VIP_ERROR_NOT_SUPPORTED: no such sleep here
 * (no waiter slot, no futex_waitv, a provider without, a VI on no CQ):
 * use VipxCQPollFds.
 */
typedef struct {
    void *Word;
    VIP_UINT32 Token;
    VIP_UINT32 Shared;
} VIPX_SLEEP_WORD;

VIP_RETURN VipxSleepArm(VIPX_SLEEP_WORD *Self);
VIP_RETURN VipxViSleepArm(VIP_VI_HANDLE ViHandle, VIP_BOOLEAN Arm, VIPX_SLEEP_WORD *Word,
                          int *MaxSleepMs);
VIP_RETURN VipxSleepWords(const VIPX_SLEEP_WORD *Words, int Count, int TimeoutMs);
VIP_RETURN VipxSleepDisarm(void);
VIP_RETURN VipxWakeSelf(void);

/*
 * Nudges: a VI's consumer asks the peer's to look at the VI now, even if
 * the peer's program waits elsewhere: VipxViNudge sends the notice beside
 * the data path (the shm provider: on the connection's socket), and the
 * peer's provider calls the handler set with VipxNicSetNudgeHandler on one
 * of its own threads, with that VI (keep it short; it must not block). A
 * nudge is only a hint: a peer may send them without cause.
 */
typedef void (*VIPX_NUDGE_HANDLER)(VIP_PVOID Context, VIP_VI_HANDLE ViHandle);
VIP_RETURN VipxViNudge(VIP_VI_HANDLE ViHandle);
VIP_RETURN VipxNicSetNudgeHandler(VIP_NIC_HANDLE NicHandle, VIPX_NUDGE_HANDLER Handler,
                                  VIP_PVOID Context);

/*
 * Explicit listening. VipxListen makes LocalAddr's discriminator accept
 * requests now (they queue until VipConnectWait takes them), or answers
 * VIP_ERROR_RESOURCE when another process listens on it. VipxUnlisten stops:
 * queued and later requests are refused (the requester gets VIP_REJECT or
 * VIP_NO_MATCH) and threads blocked in VipConnectWait on it return
 * VIP_INVALID_STATE. VipConnectWait on a discriminator not listened to
 * starts listening implicitly, as before.
 */
VIP_RETURN VipxListen(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr);
VIP_RETURN VipxUnlisten(VIP_NIC_HANDLE NicHandle, VIP_NET_ADDRESS *LocalAddr);

/* A static string naming a VIP_RETURN code ("VIP_SUCCESS", ...). */
const char *VipxReturnString(VIP_RETURN Code);

/*
 * Connections held by several processes (fork). After fork() the child has
 * a copy of every VI; VipxNicAfterFork, called in the child, restarts the
 * provider's background threads for them, and closes the child's copies of
 * the NIC's listening endpoints, as VipxNicLeaveListening does alone (for a
 * child that will not use the NIC): listening (VipConnectWait) stays the
 * parent's, and the child must listen anew to accept. VipxViShare tells the provider
 * that this connected VI is now held by more than one process: the end of
 * this process no longer ends the connection, only the last holder's does.
 * VipxViRelease is how one holder lets go of a shared connected VI: the VI
 * is destroyed in this process (its posted descriptors are forgotten, not
 * completed) and the peer is told nothing; the peer sees the connection end
 * (PeerClosed in VipxQueryViStats) when the last holder releases it or exits.
 * VipxNicForkLocks, part of VipxNicAfterFork, only makes the NIC's and the
 * provider's locks new (a thread that held one at the fork is not in the
 * child), for a child that keeps the parent's VIs only to close them: the
 * provider's threads stay the parent's, and what they share with the
 * parent is left alone.
 */
VIP_RETURN VipxNicAfterFork(VIP_NIC_HANDLE NicHandle);
VIP_RETURN VipxNicForkLocks(VIP_NIC_HANDLE NicHandle);
VIP_RETURN VipxNicLeaveListening(VIP_NIC_HANDLE NicHandle);
VIP_RETURN VipxViShare(VIP_VI_HANDLE ViHandle);
VIP_RETURN VipxViRelease(VIP_VI_HANDLE ViHandle);

/*
 * A receive-queue notify (VipRecvNotify) takes a completion off the queue
 * before its handler runs, so a consumer that captures the VI's state
 * (VipxViExport before exec) while the handler waits for the consumer's
 * lock would record a queue without that packet. VipxViNotifyHold(vi,
 * VIP_TRUE) stops the notify thread taking any more; VipxViNotifyIdle is
 * then VIP_TRUE once no completion it took is still in its handler (wait
 * for it without the lock the handler needs). VIP_FALSE lets it go on
 * (a failed exec). Both succeed on a VI with no notify.
 */
VIP_RETURN VipxViNotifyHold(VIP_VI_HANDLE ViHandle, VIP_BOOLEAN Hold);
VIP_BOOLEAN VipxViNotifyIdle(VIP_VI_HANDLE ViHandle);

/*
 * VipDisconnect for a VI that is destroyed next: the same flush and notice
 * to the peer, but the VI keeps its old memory (VipDisconnect gives it fresh
 * segments, so that an old peer keeps only orphaned memory: a memfd made,
 * mapped and sealed, then unmapped at once by VipDestroyVi). It can no longer
 * connect (VIP_INVALID_STATE); its completed and flushed descriptors are
 * still reaped with VipRecvDone/VipSendDone before VipDestroyVi.
 */
VIP_RETURN VipxDisconnectLast(VIP_VI_HANDLE ViHandle);

/*
 * Handing a connected VI to the next program image (exec). The state is
 * provider data plus descriptors; the caller keeps the descriptors open
 * across exec (clears FD_CLOEXEC) and passes the rest as it likes.
 *
 * VipxViExport describes an inheritable connected VI whose send queue is
 * empty (every send reaped) and whose posted receives all lie in its arena:
 * PostedOffsets[] gets the arena offset of each receive still posted, in
 * posting order (*NumPosted: capacity in, count out). Nothing changes for
 * the VI; stop using it after the export.
 *
 * VipxViImport rebuilds it, connected, in this image: same attributes and
 * arena (at a new address: see VipxViArena), attached to RecvCQ. Then
 * VipxViImportRecv, once per exported posted receive and in the same order,
 * gives each its new descriptor (a receive of the same arena offset and
 * length); completions the peer wrote meanwhile are delivered as usual.
 *
 * A CQ that peers wake (the VI's RecvCQ) moves the same way: VipxCQExport in
 * the old image, VipxCQImport in the new one, before the VIs.
 *
 * The shm provider does not seal an inheritable VI's ctl segment or an
 * inheritable CQ's armed page against its peers' writes (the new image must
 * map them writable again): a peer that writes them only disturbs its own
 * view of our posted receives, or our wake-ups (bounded: CQ sleeps are
 * sliced at 10 ms). docs/SECURITY.md has the whole threat model.
 */
/*
 * The library's own descriptors (segments, connection and wake-up sockets).
 * A program's stale close(n), harmless with kernel sockets (EBADF), must not
 * take one of them away from a background thread that was handed n in
 * between. Each is created between VipxFdCreateBegin and VipxFdCreateEnd
 * and given to VipxFdAdopt, which moves it to a high number (clear of the
 * low ones programs reuse), registers it and returns its number; VipxFdClose
 * closes one. A preload's close(Fd) calls VipxFdAppCloseBegin(Fd): VIP_TRUE
 * means Fd is the library's (answer EBADF, nothing more to do); VIP_FALSE
 * means close it and then call VipxFdAppCloseEnd. VipxFdIsOwn asks only.
 */
void VipxFdCreateBegin(void);
int VipxFdAdopt(int Fd);
void VipxFdCreateEnd(void);
int VipxFdClose(int Fd);
VIP_BOOLEAN VipxFdIsOwn(int Fd);
VIP_BOOLEAN VipxFdAppCloseBegin(int Fd);
void VipxFdAppCloseEnd(void);
/* A copy of the program's Fd that the library keeps after the program
 * closed it (a high number, close-on-exec, closed in a forked child);
 * VipxFdClose closes it. -1 with errno on failure. */
int VipxFdKeep(int Fd);
/* Between these two, VipxFdClose closes nothing: the closes are made by
 * VipxFdDeferEnd (an image importing its inherited connections, whose
 * records may name one shared descriptor several times, must not have a
 * number change hands halfway). */
void VipxFdDeferBegin(void);
void VipxFdDeferEnd(void);
/* Whether Count more of the library's descriptors would still leave a
 * quarter of the soft RLIMIT_NOFILE free, counting the library's own
 * exactly and the program's as the lowest free number (all below it are
 * open: a lower bound). */
VIP_BOOLEAN VipxFdRoom(int Count);

/*
 * A library thread (the provider's agent, notify threads, the sockets
 * layer's service, listener and handler threads): pthread_create with
 * every signal blocked in the new thread, so the program's signals never
 * land there. Library threads never keep the process alive: once the
 * program's last thread has gone without exit() (killed by a seccomp
 * filter, pthread_exit, SYS_exit), the process ends as it would have
 * without them (src/vipl/watch.c). Returns 0 or an errno value.
 */
int VipxThreadCreate(pthread_t *Thread, const pthread_attr_t *Attr, void *(*Start)(void *),
                     void *Arg);
/* Has thread Tid of this process ended (its lock holder died inside)? */
VIP_BOOLEAN VipxThreadGone(int Tid);
/*
 * The contended path of a spinlock whose word (an _Atomic int32_t) holds
 * its owner's thread id, 0 when free, as the library's own locks are (the
 * sockets layer's too): spins, yields, and takes the lock over from an
 * owner that died inside its section. VIP_FALSE: it was taken over, and
 * what it protects was left where the owner died.
 */
VIP_BOOLEAN VipxLockSlow(void *LockWord, int Self);

#define VIPX_CQ_INHERITABLE 1u /* VipxCreateCQ: the CQ can be exported */
VIP_RETURN VipxCreateCQ(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, VIP_ULONG Flags,
                        VIP_CQ_HANDLE *CQHandle);

#define VIPX_STATE_FDS 8
#define VIPX_STATE_BYTES 256

typedef struct {
    VIP_UINT32 NumFds;
    int Fds[VIPX_STATE_FDS];
    VIP_UINT32 Length;
    VIP_UINT8 Data[VIPX_STATE_BYTES];
} VIPX_STATE;

VIP_RETURN VipxViExport(VIP_VI_HANDLE ViHandle, VIPX_STATE *State, VIP_ULONG *PostedOffsets,
                        VIP_ULONG *NumPosted);
VIP_RETURN VipxViImport(VIP_NIC_HANDLE NicHandle, VIP_VI_ATTRIBUTES *ViAttribs,
                        VIP_CQ_HANDLE SendCQHandle, VIP_CQ_HANDLE RecvCQHandle,
                        const VIPX_STATE *State, VIP_VI_HANDLE *ViHandle);
VIP_RETURN VipxViImportRecv(VIP_VI_HANDLE ViHandle, VIP_DESCRIPTOR *DescriptorPtr,
                            VIP_MEM_HANDLE MemoryHandle);
/*
 * VipxViForgetExport: the VI will not be exported (the consumer knows no
 * next image will take it: under sovia run, its socket is close-on-exec).
 * An inheritable VI lets go of what it kept for VipxViExport (shm: the
 * memfd of its own segments and those of the peer's, two descriptors per
 * connection); VipxViExport fails with VIP_INVALID_STATE from then on.
 * Nothing changes for the connection.
 */
VIP_RETURN VipxViForgetExport(VIP_VI_HANDLE ViHandle);
/*
 * Handing a shared VI's queue state between the processes that hold it
 * (after fork, or exec with another holder alive). The VI's segments are
 * already mapped in each; what differs is each process's private view of
 * the queues. VipxViSyncSave describes a connected VI whose send queue is
 * empty, as VipxViExport does but without descriptors (PostedOffsets: the
 * arena offsets of the receives still posted, in order). VipxViSyncLoad
 * makes another holder's copy of the same VI agree with it: its own
 * receive queue is dropped (no completion is reported for it), and
 * VipxViImportRecv, once per saved offset and in order, re-attaches its
 * descriptors. Only one holder may use the VI between a save and the next
 * load elsewhere; the caller serialises them. Both work on a VI in ERROR
 * too (what the peer completed before it went is still delivered, in
 * order, then the rest flushes); receives posted after the failure are
 * not saved.
 */
VIP_RETURN VipxViSyncSave(VIP_VI_HANDLE ViHandle, VIPX_STATE *State, VIP_ULONG *PostedOffsets,
                          VIP_ULONG *NumPosted);
VIP_RETURN VipxViSyncLoad(VIP_VI_HANDLE ViHandle, const VIPX_STATE *State);
VIP_RETURN VipxCQExport(VIP_CQ_HANDLE CQHandle, VIPX_STATE *State);
VIP_RETURN VipxCQImport(VIP_NIC_HANDLE NicHandle, VIP_ULONG EntryCount, const VIPX_STATE *State,
                        VIP_CQ_HANDLE *CQHandle);

/*
 * Builds a VIP_NET_ADDRESS from a host address and a discriminator in
 * malloc'd memory (free() it). Returns NULL on bad lengths or no memory.
 */
VIP_NET_ADDRESS *VipxAllocNetAddress(const void *HostAddress, VIP_UINT16 HostAddressLen,
                                     const void *Discriminator, VIP_UINT16 DiscriminatorLen);

#ifdef __cplusplus
}
#endif

#endif /* VIPL_EXT_H */
