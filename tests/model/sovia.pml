/*
 * sovia.pml - a Promela model of one sovia connection (docs/PROTOCOL.md,
 * src/sovia/data.c, conn.c, close.c), checked with spin by check.py.
 *
 * Two processes, End(0) and End(1), are the two ends of one connection;
 * each sends and receives. One step of a process is one critical section
 * of the implementation under the socket's lock (an application call, the
 * HANDLER/NOTIFY thread, the service thread as close thread or combining
 * timer): every step is `atomic`, and any enabled step may come next, so
 * the application calls sovia in every possible order and the handling of
 * completed receives may be as late as possible (SINGLE mode, an
 * application busy elsewhere) or as early as possible (HANDLER mode).
 *
 * What is checked (see README.md):
 *  - the pre-posting constraint: a packet never arrives at an end with no
 *    receive posted (assert in deliver), given the P = w + ceil(w/t) + 2
 *    buffers the implementation posts (FEWER=k posts k fewer);
 *  - no invalid end state: both ends always finish (close thread done, or
 *    reset), with no 60 s close timeout to help;
 *  - DATA is handled in order, exactly once, and an end that reads to end of
 *    stream has read every message the peer sent; an honest peer never
 *    trips the receiver's EPROTO check on the piggybacked ACK count.
 *
 * Abstractions: bytes are counted in packets (a DATA packet is one message,
 * its size does not matter to flow control); the shm provider delivers a
 * send into the peer's posted buffer at once (a real NIC delivers later,
 * which only consumes the buffer later); the combining buffer holds one
 * message; connection setup starts with both VIs connected and P posted.
 */

/* ---- Configuration (spin -D...) ------------------------------------------ */

#ifndef W0
#define W0 2 /* window w of end 0: DATA buffers it offers the peer */
#endif
#ifndef T0
#define T0 1 /* delayed-ACK threshold t of end 0 */
#endif
#ifndef W1
#define W1 W0
#endif
#ifndef T1
#define T1 T0
#endif
#ifndef N0
#define N0 (W1 + 1) /* messages end 0 sends: more than the peer's window */
#endif
#ifndef N1
#define N1 (W0 + 1)
#endif
#ifndef FEWER
#define FEWER 0 /* negative check: post FEWER buffers less than P */
#endif
#ifndef COMBINE
#define COMBINE 1 /* the combining buffer and its timer (default on) */
#endif
#ifndef GRACEFUL
#define GRACEFUL 1 /* 1: each application sends all, reads to EOF, then
                      closes; 0: it may shut down, close or abort any time */
#endif
#ifndef POLLER
#define POLLER 0 /* the application never waits inside sovia: it retries a
                    non-blocking recv() after EAGAIN (or sleeps elsewhere) */
#endif
#ifndef FIX_DEFER
#define FIX_DEFER 1 /* as the code: defer a repost only while ack_every < w
                       (0: the rule before the fix, which stalls a poller) */
#endif
#ifndef BUG_NO_PACING
#define BUG_NO_PACING 0 /* injected bug: ACKs not paced to the peer's slots */
#endif
#ifndef BUG_ACK_EVERY
#define BUG_ACK_EVERY 0 /* injected bug: an ACK packet for every buffer */
#endif
#ifndef BUG_NO_CLOSE_THREAD
#define BUG_NO_CLOSE_THREAD 0 /* injected bug: nobody handles after close() */
#endif

#define QMAX 16 /* completion queue capacity: more than any P checked */
#define CEIL(a, b) (((a) + (b) - 1) / (b))
/* The implementation's receive buffers (sov_recv_buffers in config.c). */
#define PBUF(w, t) ((w) + CEIL(w, t) + 2)

mtype = { DATA, ACK, WAKEUP, FIN, FINACK };

/* ---- State ---------------------------------------------------------------- */

byte W[2], T[2], N[2];
byte P[2];         /* sov_recv_buffers(): what the WAKEUP's slot count is from */
byte posted[2];    /* receive descriptors posted on end i's VI */
chan cq[2] = [QMAX] of { mtype, byte, byte }; /* completed receives: type, acks, seq */

byte credits[2];     /* DATA packets the peer can still take */
byte to_ack[2];      /* d: buffers reposted, not yet acknowledged */
byte peer_window[2]; /* from the peer's WAKEUP; 0 before it */
byte ack_every[2];   /* effective t: max(t, ceil(w / peer's ACK slots)) */
bool deferred[2];    /* a read buffer whose repost waits (consumed()) */
byte rq[2];          /* recvq: handled DATA buffers not yet read */
byte hseq[2];        /* next DATA sequence number handling expects */
byte nread[2];       /* messages the application read */
byte sent[2];        /* messages the application gave to send() */
bool cbuf[2];        /* a message waits in the combining buffer */
bool wr_shut[2], fin_acked[2], peer_fin[2], reset[2], app_closed[2];
bool clean[2];       /* the end finished by the FIN/FINACK exchange */
bool broken;         /* VipDisconnect: the VI pair is no longer connected */

/* Scratch of one atomic step: not part of the state vector. */
hidden mtype h_typ;
hidden byte h_acks, h_seq;
hidden byte h_ok;

/* ---- The provider ------------------------------------------------------- */

/* VipPostSend from end i: lands in end 1-i's next posted receive at once
 * (the shm provider copies inside VipPostSend). On a reliable VI a send
 * that finds no receive posted breaks the connection: that is the
 * pre-posting constraint, and the property this model checks. */
inline deliver(i, typ, acks, seq)
{
    if
    :: broken ->
        reset[i] = true; /* the send completes with an error: ECONNRESET */
        h_ok = false
    :: else ->
        printf("MSC: end %d sends %e acks=%d seq=%d; end %d has %d receives posted\n",
               i, typ, acks, seq, 1 - i, posted[1 - i]);
        assert(posted[1 - i] > 0); /* pre-posting constraint */
        posted[1 - i]--;
        cq[1 - i]!typ, acks, seq;
        h_ok = true
    fi
}

/* ---- The protocol engine (data.c, conn.c) ---------------------------------- */

/* sov_post_packet: every packet but WAKEUP carries the acknowledgements
 * owed (piggybacking) and clears them once sent. */
inline send_pkt(i, typ, seq)
{
    if
    :: typ == WAKEUP -> deliver(i, typ, 0, seq)
    :: else ->
        deliver(i, typ, to_ack[i], seq);
        if
        :: h_ok -> to_ack[i] = 0
        :: else
        fi
    fi
}

/* repost(): VipPostRecv. On a broken VI the provider completes it as
 * flushed, which the BROKE step below turns into reset. */
inline repost(i)
{
    if
    :: !broken -> posted[i]++
    :: else
    fi
}

/* repost_and_ack(): a read DATA buffer is posted again and owed to the
 * peer; t owed buffers make an ACK packet at once. */
inline repost_and_ack(i)
{
    repost(i);
    to_ack[i]++;
    if
    :: to_ack[i] >= ack_every[i] -> send_pkt(i, ACK, 0)
    :: else
    fi
}

/* consumed(): the application read a buffer completely. With w >= 4 the
 * last read buffer's repost is deferred until the next send or wait.
 * FIX_DEFER: not when ack_every == w, where the held buffer can be the one
 * whose ACK the peer's closed window waits for. */
inline consumed(i)
{
    if
    :: deferred[i] -> deferred[i] = false; repost_and_ack(i)
    :: else
    fi;
    if
    :: W[i] < 4 || (FIX_DEFER && ack_every[i] >= W[i]) -> repost_and_ack(i)
    :: else -> deferred[i] = true
    fi
}

inline repost_deferred(i)
{
    if
    :: deferred[i] -> deferred[i] = false; repost_and_ack(i)
    :: else
    fi
}

/* abort_conn(): a protocol violation or data after close: VipDisconnect. */
inline abort_conn(i)
{
    printf("MSC: end %d aborts: VipDisconnect\n", i);
    reset[i] = true;
    broken = true
}

/* sov_handle_packet() and sov_conn_wakeup() for the oldest completed
 * receive of end i. */
inline handle(i)
{
    cq[i]?h_typ, h_acks, h_seq;
    printf("MSC: end %d handles %e acks=%d seq=%d\n", i, h_typ, h_acks, h_seq);
    if
    :: h_typ == WAKEUP ->
        assert(peer_window[i] == 0); /* a second WAKEUP would be EPROTO */
        peer_window[i] = W[1 - i];
        credits[i] = W[1 - i];
        /* The peer announces nrecv - w - 2 ACK slots; our ACK packets are
         * paced to fit them: at most w / ack_every can be outstanding. */
#if BUG_ACK_EVERY
        ack_every[i] = 1;
#elif BUG_NO_PACING
        ack_every[i] = T[i];
#else
        ack_every[i] = CEIL(W[i], P[1 - i] - W[1 - i] - 2);
        if
        :: ack_every[i] < T[i] -> ack_every[i] = T[i]
        :: else
        fi;
#endif
        repost(i)
    :: else ->
        /* The receiver's EPROTO check: an honest peer never trips it. */
        assert(peer_window[i] != 0 && h_acks <= peer_window[i] - credits[i]);
        credits[i] = credits[i] + h_acks;
        if
        :: h_typ == DATA ->
            assert(h_seq == hseq[i]); /* in order, exactly once */
            hseq[i]++;
            if
            :: app_closed[i] ->
                assert(!GRACEFUL); /* data after close() resets, as TCP */
                abort_conn(i)
            :: else -> rq[i]++
            fi
        :: h_typ == ACK -> repost(i)
        :: h_typ == FIN ->
            peer_fin[i] = true;
            repost(i);
            send_pkt(i, FINACK, 0)
        :: h_typ == FINACK ->
            fin_acked[i] = true;
            repost(i)
        fi
    fi
}

/* ---- One end ---------------------------------------------------------------- */

/* The application may call sovia: connected (the peer's WAKEUP handled,
 * as connect() and the connection thread wait for it) and not closed. */
#define OPEN(i) (peer_window[i] != 0 && !app_closed[i])
/* Someone handles completions: the application, the HANDLER thread, or
 * after close() the close thread. */
#define HANDLED(i) (!BUG_NO_CLOSE_THREAD || !app_closed[i])
/* The deferred buffer is given back when the application waits in sovia
 * (sov_wait, sov_poll) or by the combining timer; a send() does it too
 * (below). POLLER: the application only retries non-blocking calls. */
#define WAITS(i) (!app_closed[i] && (!POLLER || COMBINE))

proctype End(bit i)
{
    /* connect() / the connection thread: the VI is connected with P
     * receives posted; send our WAKEUP (window and ACK slots). */
    atomic { send_pkt(i, WAKEUP, 0) }
    do
    /* Handle the oldest completed receive. */
    :: atomic { nempty(cq[i]) && HANDLED(i) -> handle(i) }
    /* The VI broke (the peer disconnected): flushed receives say so. */
    :: atomic { broken && !reset[i] && empty(cq[i]) -> reset[i] = true }

    /* send() of a large message: one DATA packet, needs a credit. */
    :: atomic {
        OPEN(i) && !reset[i] && !wr_shut[i] && sent[i] < N[i] && !cbuf[i] && credits[i] > 0 ->
        send_pkt(i, DATA, sent[i]);
        if
        :: h_ok -> credits[i]--; sent[i]++
        :: else
        fi;
        repost_deferred(i)
    }
#if COMBINE
    /* send() of a small message: into the combining buffer. */
    :: atomic {
        OPEN(i) && !reset[i] && !wr_shut[i] && sent[i] < N[i] && !cbuf[i] ->
        printf("MSC: end %d combines message %d\n", i, sent[i]);
        cbuf[i] = true;
        sent[i]++;
        repost_deferred(i)
    }
    /* The combining buffer goes out (timer, recv, poll, a large send, or
     * the close thread): one DATA packet, needs a credit. */
    :: atomic {
        cbuf[i] && HANDLED(i) && !reset[i] && credits[i] > 0 ->
        send_pkt(i, DATA, sent[i] - 1);
        if
        :: h_ok -> credits[i]--; cbuf[i] = false
        :: else
        fi
    }
#endif
    /* recv() reads one buffer (data stays readable after a reset). */
    :: atomic {
        OPEN(i) && rq[i] > 0 ->
        printf("MSC: end %d reads a buffer\n", i);
        rq[i]--;
        nread[i]++;
        consumed(i)
    }
    /* Waiting inside sovia, or the combining timer: the deferred repost. */
    :: atomic {
        deferred[i] && WAITS(i) ->
        printf("MSC: end %d reposts its deferred buffer\n", i);
        deferred[i] = false;
        repost_and_ack(i)
    }

    /* shutdown(SHUT_WR): FIN after what is combined (sov_send_fin). */
    :: atomic {
        OPEN(i) && !reset[i] && !wr_shut[i] && !cbuf[i] && (!GRACEFUL || sent[i] == N[i]) ->
        send_pkt(i, FIN, 0);
        wr_shut[i] = h_ok
    }
    /* close(): after everything is read (graceful), or any time. Unread
     * data or a reset aborts; else FIN now (or the close thread sends it
     * after the combining buffer) and the close thread finishes. */
    :: atomic {
        OPEN(i) && (!GRACEFUL || (sent[i] == N[i] && rq[i] == 0 && peer_fin[i])) ->
        printf("MSC: end %d calls close()\n", i);
        if
        :: GRACEFUL -> assert(nread[i] == N[1 - i]) /* every message, then EOF */
        :: else
        fi;
        if
        :: rq[i] > 0 || reset[i] -> abort_conn(i); break
        :: else ->
            app_closed[i] = true;
            if
            :: !cbuf[i] && !wr_shut[i] -> send_pkt(i, FIN, 0); wr_shut[i] = h_ok
            :: else
            fi
        fi
    }
#if !GRACEFUL
    /* close() with SO_LINGER {1, 0}, or after the application saw
     * ECONNRESET: the connection is torn down at once. */
    :: atomic { OPEN(i) -> abort_conn(i); break }
#else
    /* An application that sends all and reads to EOF never sees
     * ECONNRESET: recv() would report it only with nothing left to read
     * and no FIN. */
    :: atomic {
        OPEN(i) && reset[i] && rq[i] == 0 && !peer_fin[i] && empty(cq[i]) ->
        assert(false)
    }
#endif

    /* The close thread: FIN once the combining buffer is out ... */
    :: atomic {
        app_closed[i] && HANDLED(i) && !reset[i] && !wr_shut[i] && !cbuf[i] ->
        send_pkt(i, FIN, 0);
        wr_shut[i] = h_ok
    }
    /* ... and CLOSED (or reset): the VI is disconnected and destroyed. */
    :: atomic {
        app_closed[i] && HANDLED(i) && (reset[i] || (wr_shut[i] && fin_acked[i] && peer_fin[i])) ->
        printf("MSC: end %d is done (reset %d): VipDisconnect\n", i, reset[i]);
        clean[i] = !reset[i];
        broken = true;
        break
    }
    od;
    /* In a graceful exchange only a peer that already finished cleanly can
     * have broken the VI under us. */
    assert(!GRACEFUL || !reset[i] || clean[1 - i])
}

init {
    atomic {
        W[0] = W0; T[0] = T0; N[0] = N0;
        W[1] = W1; T[1] = T1; N[1] = N1;
        P[0] = PBUF(W0, T0);
        P[1] = PBUF(W1, T1);
        assert(T0 >= 1 && T0 <= W0 && T1 >= 1 && T1 <= W1); /* sov_config_check */
        assert(P[0] <= QMAX && P[1] <= QMAX && P[0] > FEWER && P[1] > FEWER);
        posted[0] = P[0] - FEWER;
        posted[1] = P[1] - FEWER;
        run End(0);
        run End(1)
    }
}
