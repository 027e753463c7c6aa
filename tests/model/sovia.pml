/*
 * sovia.pml - a Promela model of one sovia connection (docs/PROTOCOL.md,
 * src/sovia/data.c, conn.c, close.c, migrate.c), checked with spin by
 * check.py.
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
 *    receive posted (assert in deliver), given the P = w + ceil(w/t) + 4
 *    buffers the implementation posts (FEWER=k posts k fewer);
 *  - no invalid end state: both ends always finish (close thread done, or
 *    reset), with no 60 s close timeout to help;
 *  - DATA is handled in order, exactly once, and an end that reads to end of
 *    stream has read every message the peer sent; an honest peer never
 *    trips the receiver's EPROTO check on the piggybacked ACK count;
 *  - with MIGRATE (sovia run's migration back to the kernel connection,
 *    migrate.c): each application reads its peer's stream in order, once,
 *    across the VI and the kernel connection; every migration completes
 *    without a reset; honest ends keep the migration rules of
 *    docs/PROTOCOL.md (the receiver's checks never fire).
 *
 * Abstractions: bytes are counted in packets (a DATA packet is one message,
 * its size does not matter to flow control); the shm provider delivers a
 * send into the peer's posted buffer at once (a real NIC delivers later,
 * which only consumes the buffer later); the combining buffer holds one
 * message; connection setup starts with both VIs connected and P posted;
 * the kernel connection is a FIFO of message numbers per direction that
 * always takes what is written (its buffers are not what is checked).
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

/* Migration (sovia run, migrate.c). MIGRATE: bit 0 lets end 0's program
 * leave for the kernel connection (sov_migrate) at any point after
 * pairing, bit 1 end 1's; 3 lets both, so their REQUESTs may cross. */
#ifndef MIGRATE
#define MIGRATE 0
#endif
/* How the programs around a migration behave (the checks that pass assume
 * 0; README.md, "Findings", says what each 1 finds in the code): */
#ifndef LATE
#define LATE 0 /* an end may also leave after it answered the peer's REQUEST */
#endif
#ifndef MIG_CLOSE
#define MIG_CLOSE 0 /* close() may overlap a migration, and an end may
                       leave after its peer's program closed the socket */
#endif
#ifndef THREADS
#define THREADS 0 /* another thread of a leaving program may send, read or
                     shut down while sov_migrate waits (it drops the lock) */
#endif
#ifndef CREDIT_WAIT
#define CREDIT_WAIT 0 /* a send() with no credit blocks in wait_credit (the
                         lock dropped, packets handled meanwhile) instead
                         of being taken only once a credit is there */
#endif
/* What main's code did (0) or a fix (1), README.md "Findings"; the default
 * is what the code does now: */
#ifndef FIX_PUSH
#define FIX_PUSH 1 /* 1: bytes owed to the kernel go out only after the END */
#endif
#ifndef FIX_LOST
#define FIX_LOST 1 /* 1: the VI failing is no reset after our END (unless
                      the peer's is due), nor for a send while the peer's
                      END is due (a flushed receive before that END is) */
#endif
#ifndef FIX_KFIN
#define FIX_KFIN 1 /* 1: shutdown() leaves the kernel socket alone while
                      carried; it is shut once the stream is the kernel's */
#endif
#ifndef FIX_FLUSH
#define FIX_FLUSH 1 /* 1: sov_migrate sends no DATA for what it had combined
                       (which needs a credit, waited for without a deadline):
                       REQUEST at once; the combined bytes are owed to the
                       kernel socket, behind what a crossing peer gives back */
#endif
#ifndef FIX_GB_ACK
#define FIX_GB_ACK 1 /* 1: give_back, waiting for a credit, acknowledges
                        what it owes (ACK packet) */
#endif
#ifndef FIX_ACK_AFTER_END
#define FIX_ACK_AFTER_END 1 /* 1: an ACK packet after the peer's END (it
                               acknowledges what we gave back) is no fault */
#endif
#ifndef FIX_RET_ROOM
#define FIX_RET_ROOM 1 /* 1: the return buffer is capped by the peer's
                          window (plus our combined bytes), not ours */
#endif
#ifndef FIX_THREADS
#define FIX_THREADS 1 /* 1: another thread's send(), shutdown() or recv()
                         with nothing on the VI waits while sov_migrate
                         moves the socket, then uses the kernel's */
#endif
#ifndef FIX_CREDIT_WAIT
#define FIX_CREDIT_WAIT 1 /* 1: a send waiting for a credit stops when the
                             stream leaves the VI (the peer's REQUEST, or our
                             own move) and goes where the stream goes; 0: it
                             posts DATA on the VI once a credit comes */
#endif
#ifndef FIX_LATE
#define FIX_LATE 1 /* 1: an end leaving after it answered the peer's REQUEST
                      (LATE) sends no REQUEST: it falls back once the
                      peer's END came and what was owed went out, and
                      fails only with VI bytes unread */
#endif
#ifndef FIX_ANSWER
#define FIX_ANSWER 1 /* 1: an end answers the peer's REQUEST with a REQUEST of
                        its own, then the ACK: every migration is a crossing,
                        and the answering end's side moves too, by whoever
                        handles its socket (autom), not its program: what
                        its program had not read goes back to the peer,
                        which writes it to the kernel first (3.10) */
#endif
#ifndef FIX_REPOST
#define FIX_REPOST 1 /* 1: after the peer's END, buffers are reposted while
                        we still give back (its ACKs for it keep coming) */
#endif
#ifndef FIX_CLOSE
#define FIX_CLOSE 1 /* 1: the close thread is done once the peer's END came
                       (what was owed goes with the kernel socket) */
#endif

#define QMAX 16 /* completion queue capacity: more than any P checked */
#define KMAX 8  /* kernel connection and return buffer: more than any N */
#define CEIL(a, b) (((a) + (b) - 1) / (b))
/* The implementation's receive buffers (sov_recv_buffers in config.c):
 * w DATA, ceil(w/t) ACK, FIN, FINACK, a MIGRATE REQUEST and ACK
 * (SOV_CTRL_BUFFERS). */
#define PBUF(w, t) ((w) + CEIL(w, t) + 4)
/* ACK slots a WAKEUP announces (packet_imm in conn.c): P - w - 4. */
#define SLOTS(j) (P[j] - W[j] - 4)
#define MAYLEAVE(i) ((MIGRATE >> (i)) & 1)

mtype = { DATA, ACK, WAKEUP, FIN, FINACK, MIG };

/* MIGRATE packets' sub-type, in the seq field (MIG_REQUEST, MIG_ACK, MIG_END). */
#define SREQ 0
#define SACK 1
#define SEND 2
/* Our end's migration (sov_conn.mig; MENDED is the code's MIG_RETURNING
 * after the END went, while sov_migrate waits for peer_done). */
#define MNONE 0
#define MASKED 1
#define MRET 2
#define MENDED 3
#define MDONE 4
/* The peer's (sov_conn.peer_mig). */
#define PNONE 0
#define PASKED 1
#define PENDED 2

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

/* Migration (all constant without MIGRATE). */
byte mig[2], pmig[2];
bool leaving[2];     /* the program is inside sov_migrate */
bool autom[2];       /* FIX_ANSWER: our side moves because the peer asked */
bool fell[2];        /* sov_tp_fall_back: a plain kernel socket, VI gone */
bool peer_gone[2];   /* sov_conn_lost with the peer's FIN: orderly end */
bool flushed[2];     /* the VI's flushed receives were seen */
bool eof[2];         /* the program read the end of the peer's stream */
bool swait[2];       /* CREDIT_WAIT: its send() waits for a credit */
bool kfin[2];        /* end i's kernel socket shut for writing, or closed */
#if MIGRATE
byte gb[2];          /* give_back: 1 + the message read, waiting for credit */
chan kern[2] = [KMAX] of { byte }; /* kernel connection from end i */
/* c->ret: what end i owes the kernel connection: the peer's unread
 * messages given back (retq), then the one it had combined (tpend, tseq);
 * rtail is the code's ret_tail (the combined bytes still at the end). */
chan retq[2] = [KMAX] of { byte };
bool tpend[2], rtail[2];
byte tseq[2];
#endif

/* Scratch of one atomic step: not part of the state vector. */
hidden mtype h_typ;
hidden byte h_acks, h_seq;
hidden byte h_ok;
hidden byte h_pushed;
/* Named properties: an assertion's text says which one failed. */
hidden byte reset_in_graceful_run;
hidden byte migration_failed;
hidden byte ret_tail_underflow;
hidden byte owed_bytes_after_kernel_fin;
hidden byte rule_one_request;
hidden byte rule_ack_only_to_our_request;
hidden byte rule_end_only_after_request;
hidden byte rule_no_data_after_ack;
hidden byte rule_no_data_after_our_request;
hidden byte rule_no_fin_after_request;
hidden byte rule_nothing_after_end;

inline violated(flag)
{
    flag = 1;
    assert(!flag)
}

/* ---- The provider ------------------------------------------------------- */

/* sov_conn_abort / a reset from the VI: ECONNRESET. In a graceful run with
 * migration nothing may reset (every migration must complete). */
inline set_reset(i)
{
    reset[i] = true;
#if MIGRATE && GRACEFUL
    violated(reset_in_graceful_run)
#endif
}

/* sov_conn_lost: the VI failed under us (a send completed flushed, or a
 * flushed receive). Without MIGRATE the model keeps its first abstraction
 * (a reset); with it, the code's rule: no loss once the peer's END came,
 * an orderly end after the peer's FIN (PeerClosed is never set: the VIs
 * here always go by VipDisconnect), else a reset. FIX_LOST: no loss
 * either once our END went and no END of the peer's is due. */
inline conn_lost(i)
{
#if MIGRATE
    if
    :: pmig[i] == PENDED || (FIX_LOST && mig[i] == MENDED && pmig[i] == PNONE)
    :: else ->
        if
        :: !reset[i] && peer_fin[i] -> peer_gone[i] = true
        :: else -> set_reset(i)
        fi
    fi
#else
    reset[i] = true
#endif
}

/* post() when the send completes flushed: what it returns is 0 exactly when
 * sov_conn_lost says no loss (FIX_LOST: also while the peer's END is due). */
#define LOST_OK(i) (pmig[i] == PENDED || (FIX_LOST && pmig[i] == PASKED))
inline send_lost(i)
{
#if MIGRATE && FIX_LOST
    if
    :: pmig[i] == PASKED
    :: else -> conn_lost(i)
    fi
#else
    conn_lost(i)
#endif
}

/* VipPostSend from end i: lands in end 1-i's next posted receive at once
 * (the shm provider copies inside VipPostSend). On a reliable VI a send
 * that finds no receive posted breaks the connection: that is the
 * pre-posting constraint, and the property this model checks. */
inline deliver(i, typ, acks, seq)
{
    if
    :: broken ->
        printf("MSC: end %d sends %e seq=%d: the VI is gone, flushed\n", i, typ, seq);
        h_ok = false;
        send_lost(i)
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
 * flushed, which the BROKE step below turns into sov_conn_lost. Once the
 * peer's END came nothing is reposted (nothing more comes). */
inline repost(i)
{
    if
    :: !broken && (pmig[i] != PENDED || (FIX_REPOST && mig[i] == MRET)) -> posted[i]++
    :: else
    fi
}

/* repost_and_ack(): a read DATA buffer is posted again and owed to the
 * peer; t owed buffers make an ACK packet at once. */
inline repost_and_ack(i)
{
    repost(i);
#if MIGRATE
    if
    :: pmig[i] == PENDED
    :: else ->
#endif
        to_ack[i]++;
        if
        :: to_ack[i] >= ack_every[i] -> send_pkt(i, ACK, 0)
        :: else
        fi
#if MIGRATE
    fi
#endif
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
    set_reset(i);
    broken = true
}

/* ---- The kernel connection (migrate.c) -------------------------------------- */

#define RETLEN(i) (len(retq[i]) + tpend[i])

/* sov_mig_push: what end i owes goes out on its kernel socket, the given
 * back messages first, then the combined one. After its own SHUT_WR (or
 * close) the kernel refuses: the code drops what is owed. */
inline mig_push(i)
{
    h_pushed = 0;
    do
    :: len(retq[i]) > 0 ->
        if
        :: kfin[i] -> violated(owed_bytes_after_kernel_fin)
        :: else
        fi;
        retq[i]?h_seq;
        printf("MSC: end %d writes message %d (given back) to its kernel socket\n", i, h_seq);
        kern[i]!h_seq;
        h_pushed = 1
    :: len(retq[i]) == 0 && tpend[i] ->
        if
        :: kfin[i] -> violated(owed_bytes_after_kernel_fin)
        :: else
        fi;
        printf("MSC: end %d writes message %d (it had combined) to its kernel socket\n", i, tseq[i]);
        kern[i]!tseq[i];
        tpend[i] = false;
        h_pushed = 1
    :: RETLEN(i) == 0 -> break
    od;
    /* The code's ret_len = 0 (ret_tail stays), and the FIN after it. */
    if
    :: h_pushed && pmig[i] == PENDED && wr_shut[i] -> kfin[i] = true
    :: else
    fi
}

/* peer_asks(): the peer's REQUEST. Its stream on the VI ends here; ours
 * ends with our ACK; what we had combined waits, behind what it gives back. */
inline peer_asks(i)
{
    if
    :: pmig[i] != PNONE -> violated(rule_one_request)
    :: else
    fi;
    if
    :: app_closed[i] -> abort_conn(i) /* no kernel socket left to carry it */
    :: else ->
        pmig[i] = PASKED;
        if
        :: cbuf[i] ->
            tpend[i] = true;
            rtail[i] = true;
            tseq[i] = sent[i] - 1;
            cbuf[i] = false
        :: else
        fi;
        /* FIX_ANSWER: our REQUEST first, so the peer has it before the
         * ACK it waits for (it then waits for our END too). */
        if
        :: FIX_ANSWER && mig[i] == MNONE ->
            autom[i] = true;
            send_pkt(i, MIG, SREQ);
            mig[i] = MASKED
        :: else
        fi;
        send_pkt(i, MIG, SACK);
        if
        :: !h_ok && !LOST_OK(i) -> abort_conn(i)
        :: else
        fi
    fi
}

/* sov_mig_packet() */
inline mig_packet(i)
{
    if
    :: h_seq == SREQ -> peer_asks(i)
    :: h_seq == SACK ->
        if
        :: mig[i] != MASKED -> violated(rule_ack_only_to_our_request)
        :: else
        fi;
        mig[i] = MRET
    :: h_seq == SEND ->
        if
        :: pmig[i] != PASKED -> violated(rule_end_only_after_request)
        :: else
        fi;
        pmig[i] = PENDED;
        rtail[i] = false;
        mig_push(i)
    fi
}

/* sov_handle_packet() and sov_conn_wakeup() for the oldest completed
 * receive of end i. */
inline handle(i)
{
    cq[i]?h_typ, h_acks, h_seq;
    printf("MSC: end %d handles %e acks=%d seq=%d\n", i, h_typ, h_acks, h_seq);
#if MIGRATE
    if
    :: pmig[i] == PENDED && !(FIX_ACK_AFTER_END && h_typ == ACK) -> violated(rule_nothing_after_end)
    :: else
    fi;
#endif
    if
    :: h_typ == WAKEUP ->
        assert(peer_window[i] == 0); /* a second WAKEUP would be EPROTO */
        peer_window[i] = W[1 - i];
        credits[i] = W[1 - i];
        /* The peer announces nrecv - w - 4 ACK slots; our ACK packets are
         * paced to fit them: at most w / ack_every can be outstanding. */
#if BUG_ACK_EVERY
        ack_every[i] = 1;
#elif BUG_NO_PACING
        ack_every[i] = T[i];
#else
        ack_every[i] = CEIL(W[i], SLOTS(1 - i));
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
#if MIGRATE
        :: h_typ == MIG ->
            repost(i);
            mig_packet(i)
        :: h_typ == DATA && pmig[i] == PASKED ->
            /* Our own message it had not read, given back: it goes to the
             * kernel connection before the combined one (the buffer's
             * tail), so ret_len - ret_tail must be an index. */
            if
            :: RETLEN(i) < rtail[i] -> violated(ret_tail_underflow)
            :: else
            fi;
            if
            :: RETLEN(i) + 1 > (FIX_RET_ROOM -> W[1 - i] : W[i]) + 1 ->
                abort_conn(i) /* ret_room() */
            :: else ->
                printf("MSC: end %d keeps message %d given back\n", i, h_seq);
                retq[i]!h_seq;
                repost_and_ack(i)
            fi
        :: h_typ == DATA && pmig[i] != PASKED && mig[i] >= MRET ->
            violated(rule_no_data_after_ack)
#endif
        :: h_typ == DATA && pmig[i] != PASKED && mig[i] < MRET ->
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
#if MIGRATE
            if
            :: pmig[i] != PNONE -> violated(rule_no_fin_after_request)
            :: else
            fi;
#endif
            peer_fin[i] = true;
            repost(i);
            send_pkt(i, FINACK, 0)
        :: h_typ == FINACK ->
            fin_acked[i] = true;
            repost(i)
        fi
    fi
}

/* sov_migrate's flush and REQUEST (under the lock: nothing in between). */
inline request(i)
{
    if
    :: cbuf[i] && !FIX_FLUSH ->
        send_pkt(i, DATA, sent[i] - 1);
        if
        :: h_ok -> credits[i]--; cbuf[i] = false
        :: else
        fi
    :: else -> h_ok = true
    fi;
    if
    :: h_ok || LOST_OK(i) ->
        send_pkt(i, MIG, SREQ);
        if
        :: h_ok || LOST_OK(i) -> mig[i] = MASKED
        :: else -> violated(migration_failed)
        fi;
        if
        :: cbuf[i] -> /* FIX_FLUSH: owed to the kernel, as peer_asks() keeps it */
            tpend[i] = true;
            rtail[i] = true;
            tseq[i] = sent[i] - 1;
            cbuf[i] = false
        :: else
        fi
    :: else -> violated(migration_failed)
    fi
}

/* ---- One end ---------------------------------------------------------------- */

/* The application may call sovia: connected (the peer's WAKEUP handled,
 * as connect() and the connection thread wait for it) and not closed. */
#define OPEN(i) (peer_window[i] != 0 && !app_closed[i])
/* ... on the carried socket: not fallen back, and not inside sov_migrate
 * (unless another thread calls, THREADS). */
#define VIAPP(i) (OPEN(i) && !fell[i] && (!leaving[i] || THREADS))
/* FIX_THREADS: send(), shutdown() and a recv() that finds nothing on the
 * VI (the bytes given back are not ours to read) wait while sov_migrate
 * moves it. */
#define NOT_MOVING(i) (!FIX_THREADS || mig[i] == MNONE)
/* CREDIT_WAIT: the program is inside send(), waiting for a credit: no
 * other send, shutdown or close meanwhile; sov_migrate only from another
 * thread (THREADS), which moves the stream under the waiting send. */
#define NOT_IN_SEND(i) (!swait[i])
/* Our side moves: the program left (sov_migrate), or the peer asked
 * (FIX_ANSWER) and whoever handles the socket moves it. */
#define MOVES(i) (leaving[i] || (autom[i] && HANDLED(i)))
/* ... reading or writing the kernel connection: fallen back, or the peer
 * left and its VI stream is read (sov_mig_recv). */
#define KREAD(i) ((fell[i] && !app_closed[i]) || \
                  (VIAPP(i) && pmig[i] != PNONE && rq[i] == 0 && !peer_fin[i] && !reset[i]))
/* Someone handles completions: the application, the HANDLER thread, or
 * after close() the close thread; none once the VI is gone. */
#define HANDLED(i) ((!BUG_NO_CLOSE_THREAD || !app_closed[i]) && !fell[i])
/* The deferred buffer is given back when the application waits in sovia
 * (sov_wait, sov_poll) or by the combining timer; a send() does it too
 * (below). POLLER: the application only retries non-blocking calls. */
#define WAITS(i) (!app_closed[i] && !fell[i] && (!POLLER || COMBINE))
/* sov_mig_send_ready: our send side is the kernel's. */
#if MIGRATE
#define SEND_READY(i) (pmig[i] == PENDED && RETLEN(i) == 0)
#else
#define SEND_READY(i) false
#endif
/* close() does not overlap a migration (unless MIG_CLOSE): ours, the
 * peer's as we see it, or the peer's that we have not heard of yet. */
#define MAY_CLOSE(i) (MIG_CLOSE || !MIGRATE || \
                      ((pmig[i] == PNONE && mig[1 - i] == MNONE && !leaving[1 - i]) || SEND_READY(i)))

proctype End(bit i)
{
    /* connect() / the connection thread: the VI is connected with P
     * receives posted; send our WAKEUP (window and ACK slots). */
    atomic { send_pkt(i, WAKEUP, 0) }
    do
    /* Handle the oldest completed receive. */
    :: atomic { nempty(cq[i]) && HANDLED(i) -> handle(i) }
    /* The VI broke (the peer disconnected): flushed receives say so. */
    :: atomic {
        broken && !reset[i] && !flushed[i] && !fell[i] && empty(cq[i]) ->
        printf("MSC: end %d sees flushed receives\n", i);
        flushed[i] = (MIGRATE != 0);
        conn_lost(i)
    }

    /* send() of a large message: one DATA packet, needs a credit. Or a
     * send that waited for one (CREDIT_WAIT): without FIX_CREDIT_WAIT it
     * posts once a credit came, wherever the stream went meanwhile. */
    :: atomic {
        VIAPP(i) && !reset[i] && !peer_gone[i] && !wr_shut[i] && sent[i] < N[i] && !cbuf[i] &&
        credits[i] > 0 &&
        ((pmig[i] == PNONE && NOT_MOVING(i)) || (swait[i] && !FIX_CREDIT_WAIT)) ->
        if
        :: mig[i] != MNONE -> violated(rule_no_data_after_our_request)
        :: else
        fi;
        send_pkt(i, DATA, sent[i]);
        swait[i] = false;
        if
        :: h_ok -> credits[i]--; sent[i]++
        :: else
        fi;
        repost_deferred(i)
    }
    /* CREDIT_WAIT: a send() with no credit waits in wait_credit ... */
    :: atomic {
        CREDIT_WAIT && VIAPP(i) && !reset[i] && !peer_gone[i] && !wr_shut[i] && sent[i] < N[i] &&
        !cbuf[i] && !swait[i] && pmig[i] == PNONE && credits[i] == 0 && NOT_MOVING(i) ->
        printf("MSC: end %d's send of message %d waits for a credit\n", i, sent[i]);
        swait[i] = true
    }
    /* ... and with FIX_CREDIT_WAIT stops when the stream leaves the VI:
     * the rest of the call goes where the stream goes (send_moved: the
     * kernel socket once what is owed went, below). */
    :: atomic {
        FIX_CREDIT_WAIT && swait[i] && (pmig[i] != PNONE || !NOT_MOVING(i)) ->
        printf("MSC: end %d's waiting send follows the stream off the VI\n", i);
        swait[i] = false
    }
#if COMBINE
    /* send() of a small message: into the combining buffer. */
    :: atomic {
        VIAPP(i) && !reset[i] && !peer_gone[i] && !wr_shut[i] && sent[i] < N[i] && !cbuf[i] &&
        pmig[i] == PNONE && NOT_MOVING(i) && NOT_IN_SEND(i) ->
        printf("MSC: end %d combines message %d\n", i, sent[i]);
        cbuf[i] = true;
        sent[i]++;
        repost_deferred(i)
    }
    /* The combining buffer goes out (timer, recv, poll, a large send, or
     * the close thread): one DATA packet, needs a credit. */
    :: atomic {
        cbuf[i] && HANDLED(i) && !reset[i] && credits[i] > 0 ->
        if
        :: mig[i] != MNONE -> violated(rule_no_data_after_our_request)
        :: else
        fi;
        send_pkt(i, DATA, sent[i] - 1);
        if
        :: h_ok -> credits[i]--; cbuf[i] = false
        :: else
        fi
    }
#endif
    /* recv() reads one buffer (data stays readable after a reset); not
     * while the peer's REQUEST moves our side (FIX_ANSWER) and gives back
     * from the front what is unread: it waits, then reads the kernel's. */
    :: atomic {
        VIAPP(i) && rq[i] > 0 && !(autom[i] && mig[i] >= MRET) ->
        printf("MSC: end %d reads message %d from the VI\n", i, hseq[i] - rq[i]);
        assert(hseq[i] - rq[i] == nread[i]);
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

    /* shutdown(SHUT_WR): FIN after what is combined (sov_send_fin); once
     * the peer left, the kernel socket's (sov_mig_shutdown_wr). Without
     * FIX_KFIN the preload shuts the kernel socket down too. */
    :: atomic {
        VIAPP(i) && !reset[i] && !wr_shut[i] && !cbuf[i] && (!GRACEFUL || sent[i] == N[i]) &&
        NOT_MOVING(i) && NOT_IN_SEND(i) ->
        if
        :: pmig[i] == PNONE ->
            if
            :: mig[i] != MNONE -> violated(rule_no_fin_after_request)
            :: else
            fi;
            send_pkt(i, FIN, 0);
            wr_shut[i] = h_ok
        :: else ->
            printf("MSC: end %d shuts down writing (the peer left the VI)\n", i);
            wr_shut[i] = true;
            if
            :: SEND_READY(i) -> kfin[i] = true
            :: else
            fi
        fi;
        if
        :: MIGRATE && !FIX_KFIN -> kfin[i] = true
        :: else
        fi
    }
    /* close(): after everything is read (graceful), or any time. Unread
     * data or a reset aborts; else FIN now (or the close thread sends it
     * after the combining buffer) and the close thread finishes. */
    :: atomic {
        VIAPP(i) && !leaving[i] && MAY_CLOSE(i) && NOT_IN_SEND(i) &&
        (!GRACEFUL || (sent[i] == N[i] && rq[i] == 0 && (MIGRATE && eof[i] || !MIGRATE && peer_fin[i]))) ->
        printf("MSC: end %d calls close()\n", i);
        if
        :: GRACEFUL -> assert(nread[i] == N[1 - i]) /* every message, then EOF */
        :: else
        fi;
        if
        :: MIGRATE -> kfin[i] = true /* the kernel socket is closed */
        :: else
        fi;
        if
        :: rq[i] > 0 || reset[i] -> abort_conn(i); break
        :: peer_gone[i] -> broken = true; break
        :: else ->
            app_closed[i] = true;
            if
            :: !cbuf[i] && !wr_shut[i] && pmig[i] == PNONE -> send_pkt(i, FIN, 0); wr_shut[i] = h_ok
            :: !cbuf[i] && !wr_shut[i] && pmig[i] != PNONE -> wr_shut[i] = true
            :: else
            fi
        fi
    }
#if !GRACEFUL
    /* close() with SO_LINGER {1, 0}, or after the application saw
     * ECONNRESET: the connection is torn down at once. */
    :: atomic { OPEN(i) && !fell[i] && !leaving[i] -> abort_conn(i); break }
#else
    /* An application that sends all and reads to EOF never sees
     * ECONNRESET: recv() would report it only with nothing left to read
     * and no FIN. */
    :: atomic {
        !MIGRATE && OPEN(i) && reset[i] && rq[i] == 0 && !peer_fin[i] && empty(cq[i]) ->
        assert(false)
    }
#endif

    /* The close thread: FIN once the combining buffer is out ... */
    :: atomic {
        app_closed[i] && HANDLED(i) && !reset[i] && !wr_shut[i] && !cbuf[i] ->
        if
        :: pmig[i] == PNONE -> send_pkt(i, FIN, 0); wr_shut[i] = h_ok
        :: else -> wr_shut[i] = true
        fi
    }
    /* ... and CLOSED (or reset): the VI is disconnected and destroyed. */
    :: atomic {
        app_closed[i] && HANDLED(i) &&
        (reset[i] || peer_gone[i] ||
         (mig[i] == MNONE && ((wr_shut[i] && fin_acked[i] && peer_fin[i]) ||
                              (FIX_CLOSE && pmig[i] == PENDED)))) ->
        printf("MSC: end %d is done (reset %d): VipDisconnect\n", i, reset[i]);
        clean[i] = !reset[i];
        broken = true;
        break
    }

    /* ---- Migration (migrate.c) ---- */
#if MIGRATE
    /* sov_migrate(): the program is about to lose sovia (seccomp, exec,
     * io_uring); every connection goes back to its kernel socket. Its last
     * DATA (the combining buffer), then REQUEST, under the lock; its
     * program's next bytes go to the kernel socket. */
    :: atomic {
        MAYLEAVE(i) && VIAPP(i) && !leaving[i] && mig[i] == MNONE && (NOT_IN_SEND(i) || THREADS) &&
        (LATE || pmig[i] == PNONE) && (MIG_CLOSE || !app_closed[1 - i]) ->
        printf("MSC: end %d leaves for the kernel connection: sov_migrate\n", i);
        leaving[i] = true;
        if
        :: !reset[i] && !peer_gone[i] && (!cbuf[i] || credits[i] > 0 || FIX_FLUSH) &&
           (!FIX_LATE || pmig[i] == PNONE) -> request(i)
        :: else
        fi
    }
    /* FIX_ANSWER: it answered the peer's REQUEST with its own; its
     * sov_migrate waits for that move to finish (the steps below). */
    :: atomic {
        MAYLEAVE(i) && LATE && VIAPP(i) && !leaving[i] && autom[i] ->
        printf("MSC: end %d leaves while its answer moves the socket\n", i);
        leaving[i] = true
    }
    /* FIX_LATE: it answered the peer's REQUEST already; once the peer's
     * END came and what it owed went out, the stream is the kernel's,
     * unless its program has not read the VI's part, which cannot follow. */
    :: atomic {
        FIX_LATE && leaving[i] && mig[i] == MNONE && pmig[i] != PNONE && !reset[i] &&
        SEND_READY(i) ->
        if
        :: rq[i] > 0 -> violated(migration_failed)
        :: else ->
            printf("MSC: end %d falls back after the peer's END (it had answered)\n", i);
            mig[i] = MDONE;
            leaving[i] = false;
            fell[i] = true;
            broken = true
        fi
    }
    /* ... or, when the flush had to wait for a credit (handling packets
     * meanwhile, the peer's REQUEST too), once it has one. */
    :: atomic {
        leaving[i] && mig[i] == MNONE && !reset[i] && !peer_gone[i] && (!cbuf[i] || credits[i] > 0) &&
        (!FIX_LATE || pmig[i] == PNONE) ->
        request(i)
    }
    /* ... with the peer gone (its FIN, then its VI) there is nobody to ask:
     * it falls back at once if it read everything; what it had not read
     * would go with the VI, so then it fails (resets). */
    :: atomic {
        leaving[i] && mig[i] == MNONE && !reset[i] && peer_gone[i] && rq[i] > 0 ->
        violated(migration_failed)
    }
    :: atomic {
        leaving[i] && mig[i] == MNONE && !reset[i] && peer_gone[i] && rq[i] == 0 ->
        printf("MSC: end %d falls back, peer gone, nothing unread\n", i);
        mig[i] = MDONE;
        leaving[i] = false;
        fell[i] = true;
        broken = true
    }
    /* ... it fails where the connection failed (reset for both, the
     * kernel connection too: the programs read ECONNRESET):
     * wait_for() looks at its goal before it looks at peer_gone. */
    :: atomic {
        MOVES(i) && (reset[i] || (peer_gone[i] && (mig[i] == MASKED ||
                       (mig[i] == MENDED && pmig[i] != PNONE && !SEND_READY(i))))) ->
        violated(migration_failed)
    }
    /* ... after the peer's ACK: give back what its program has not read,
     * one buffer at a time (read, then sent with a credit) ... */
    :: atomic {
        MOVES(i) && mig[i] == MRET && gb[i] == 0 && rq[i] > 0 && !reset[i] ->
        printf("MSC: end %d gives back message %d\n", i, hseq[i] - rq[i]);
        gb[i] = 1 + hseq[i] - rq[i];
        rq[i]--;
        consumed(i)
    }
    :: atomic {
        MOVES(i) && mig[i] == MRET && gb[i] > 0 && credits[i] > 0 && !reset[i] ->
        send_pkt(i, DATA, gb[i] - 1);
        if
        :: h_ok || LOST_OK(i) -> credits[i]--; gb[i] = 0
        :: else -> violated(migration_failed)
        fi
    }
    :: atomic {
        FIX_GB_ACK && MOVES(i) && mig[i] == MRET && gb[i] > 0 && credits[i] == 0 && to_ack[i] > 0 ->
        send_pkt(i, ACK, 0)
    }
    /* ... then END ... */
    :: atomic {
        MOVES(i) && mig[i] == MRET && gb[i] == 0 && rq[i] == 0 && !reset[i] ->
        send_pkt(i, MIG, SEND);
        if
        :: h_ok || LOST_OK(i) -> mig[i] = MENDED
        :: else -> violated(migration_failed)
        fi
    }
    /* ... and once a crossing REQUEST of the peer's is served (its END
     * came, what it gave back went out), the VI goes: a kernel socket. */
    :: atomic {
        MOVES(i) && mig[i] == MENDED && !reset[i] && (pmig[i] == PNONE || SEND_READY(i)) ->
        printf("MSC: end %d migrated: VI dropped, a plain kernel socket\n", i);
        mig_push(i); /* FIX_FLUSH: what it had combined, first */
        mig[i] = MDONE;
        leaving[i] = false;
        fell[i] = true;
        broken = true;
        if
        :: app_closed[i] -> break /* the close thread moved it: done */
        :: else
        fi
    }
    /* The peer left: what we owe the kernel goes out (sov_mig_push, from
     * the service thread's timer, our program's send(), and the END). */
    :: atomic {
        RETLEN(i) > 0 && !fell[i] && !app_closed[i] && pmig[i] != PNONE &&
        (!FIX_PUSH || pmig[i] == PENDED) ->
        mig_push(i)
    }
    /* sov_tp_settle: the VI holds nothing more for us; a plain kernel
     * socket from the program's next call. */
    :: atomic {
        !fell[i] && !leaving[i] && OPEN(i) && mig[i] == MNONE && SEND_READY(i) && rq[i] == 0 ->
        printf("MSC: end %d falls back: the peer left and the VI is read\n", i);
        fell[i] = true;
        broken = true
    }
    /* FIX_KFIN: the kernel socket's FIN once the stream is the kernel's. */
    :: atomic {
        FIX_KFIN && wr_shut[i] && !kfin[i] && (fell[i] || SEND_READY(i)) ->
        printf("MSC: end %d shuts its kernel socket down for writing (FIX_KFIN)\n", i);
        kfin[i] = true
    }
    /* The program writes to the kernel connection: after the fall back,
     * or once the peer's END came and what was owed went out
     * (sov_mig_send; before that its send waits). */
    :: atomic {
        ((fell[i] && !app_closed[i]) || (VIAPP(i) && pmig[i] != PNONE && SEND_READY(i))) &&
        !reset[i] && !wr_shut[i] && sent[i] < N[i] && NOT_IN_SEND(i) ->
        printf("MSC: end %d writes message %d to its kernel socket\n", i, sent[i]);
        kern[i]!sent[i];
        sent[i]++
    }
    /* ... and reads from it, after the VI's part of the stream. */
    :: atomic {
        KREAD(i) && nempty(kern[1 - i]) ->
        kern[1 - i]?h_seq;
        printf("MSC: end %d reads message %d from its kernel socket\n", i, h_seq);
        assert(h_seq == nread[i]); /* in order, exactly once, none lost */
        nread[i]++
    }
    /* End of stream: the peer's FIN on the VI, or on the kernel socket. */
    :: atomic {
        !eof[i] && ((VIAPP(i) && rq[i] == 0 && peer_fin[i] && NOT_MOVING(i)) ||
                    (KREAD(i) && empty(kern[1 - i]) && kfin[1 - i])) ->
        printf("MSC: end %d reads end of stream\n", i);
        eof[i] = true
    }
    /* After the fall back: shutdown() and close() are the kernel's. */
    :: atomic {
        fell[i] && !app_closed[i] && !wr_shut[i] && (!GRACEFUL || sent[i] == N[i]) ->
        printf("MSC: end %d shuts its kernel socket down for writing\n", i);
        wr_shut[i] = true;
        kfin[i] = true
    }
    :: atomic {
        fell[i] && !app_closed[i] && (!GRACEFUL || (sent[i] == N[i] && eof[i])) ->
        printf("MSC: end %d closes its kernel socket\n", i);
        if
        :: GRACEFUL -> assert(nread[i] == N[1 - i]) /* every message, then EOF */
        :: else
        fi;
        app_closed[i] = true;
        kfin[i] = true;
        break
    }
#endif
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
        assert(N0 < KMAX && N1 < KMAX);
        assert(!MIGRATE || GRACEFUL); /* the migration checks are graceful runs */
        posted[0] = P[0] - FEWER;
        posted[1] = P[1] - FEWER;
        run End(0);
        run End(1)
    }
}
