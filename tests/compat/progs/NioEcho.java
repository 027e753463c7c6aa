// A Java NIO echo server and client (one Selector each, non-blocking
// channels), for tests/compat/test_java_nio.py.
//
//   java NioEcho server PORT NCONN
//       echoes every connection until its end of stream, all at once;
//       exits after NCONN connections ended: "served N connections, B bytes"
//   java NioEcho client PORT NCONN SIZE
//       NCONN connections at once, each writes SIZE bytes of a pattern of
//       its own while it reads and checks the echo, then shuts down output
//       and expects the end of stream: "ok N connections, B bytes"
// Exit 0 on success, 1 with a message otherwise.
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SelectionKey;
import java.nio.channels.Selector;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.Iterator;

public class NioEcho {
    static byte pattern(int conn, long pos) {
        return (byte) (((pos + conn * 1000003L) * 0x9E3779B97F4A7C15L) >>> 56);
    }

    // One connection's echo state on the server: bytes read and not yet written back.
    static final class Pending {
        final ByteBuffer buf = ByteBuffer.allocate(64 * 1024);
        boolean eof;
    }

    static void serve(int port, int nconn) throws IOException {
        Selector sel = Selector.open();
        ServerSocketChannel ls = ServerSocketChannel.open();
        ls.bind(new InetSocketAddress("127.0.0.1", port));
        ls.configureBlocking(false);
        ls.register(sel, SelectionKey.OP_ACCEPT);
        int ended = 0;
        long total = 0;
        while (ended < nconn) {
            sel.select();
            for (Iterator<SelectionKey> it = sel.selectedKeys().iterator(); it.hasNext();) {
                SelectionKey k = it.next();
                it.remove();
                if (k.isAcceptable()) {
                    SocketChannel c = ls.accept();
                    if (c == null)
                        continue;
                    c.configureBlocking(false);
                    c.register(sel, SelectionKey.OP_READ, new Pending());
                    continue;
                }
                SocketChannel c = (SocketChannel) k.channel();
                Pending p = (Pending) k.attachment();
                if (k.isReadable() && !p.eof && p.buf.hasRemaining()) {
                    int n = c.read(p.buf);
                    if (n < 0)
                        p.eof = true;
                    else
                        total += n;
                }
                p.buf.flip();
                c.write(p.buf);
                p.buf.compact();
                if (p.eof && p.buf.position() == 0) {
                    c.close();
                    ended++;
                    continue;
                }
                int ops = 0;
                if (!p.eof && p.buf.hasRemaining())
                    ops |= SelectionKey.OP_READ;
                if (p.buf.position() > 0)
                    ops |= SelectionKey.OP_WRITE;
                k.interestOps(ops);
            }
        }
        System.out.println("served " + nconn + " connections, " + total + " bytes");
    }

    // One client connection: what it wrote and what came back.
    static final class Conn {
        final int id;
        long sent, got;
        boolean shut, done;
        final ByteBuffer out = ByteBuffer.allocate(32 * 1024);
        final ByteBuffer in = ByteBuffer.allocate(64 * 1024);
        Conn(int id) { this.id = id; out.limit(0); }
    }

    static int client(int port, int nconn, long size) throws IOException {
        Selector sel = Selector.open();
        for (int i = 0; i < nconn; i++) {
            SocketChannel c = SocketChannel.open(new InetSocketAddress("127.0.0.1", port));
            c.configureBlocking(false);
            c.register(sel, SelectionKey.OP_READ | SelectionKey.OP_WRITE, new Conn(i));
        }
        int done = 0;
        long total = 0;
        while (done < nconn) {
            sel.select();
            for (Iterator<SelectionKey> it = sel.selectedKeys().iterator(); it.hasNext();) {
                SelectionKey k = it.next();
                it.remove();
                SocketChannel c = (SocketChannel) k.channel();
                Conn s = (Conn) k.attachment();
                if (k.isWritable() && !s.shut) {
                    if (!s.out.hasRemaining()) {
                        s.out.clear();
                        while (s.out.hasRemaining() && s.sent + s.out.position() < size)
                            s.out.put(pattern(s.id, s.sent + s.out.position()));
                        s.out.flip();
                    }
                    s.sent += c.write(s.out);
                    if (s.sent == size) {
                        c.shutdownOutput();
                        s.shut = true;
                        k.interestOps(SelectionKey.OP_READ);
                    }
                }
                if (k.isReadable()) {
                    s.in.clear();
                    int n = c.read(s.in);
                    if (n < 0) {
                        if (s.got != size) {
                            System.err.println("connection " + s.id + " ended after " + s.got + " of " + size);
                            return 1;
                        }
                        c.close();
                        done++;
                        total += s.got;
                        continue;
                    }
                    for (int j = 0; j < n; j++, s.got++) {
                        if (s.got >= s.sent || s.in.get(j) != pattern(s.id, s.got)) {
                            System.err.println("connection " + s.id + ": wrong byte at " + s.got);
                            return 1;
                        }
                    }
                }
            }
        }
        System.out.println("ok " + nconn + " connections, " + total + " bytes");
        return 0;
    }

    public static void main(String[] args) throws IOException {
        if (args.length == 3 && args[0].equals("server")) {
            serve(Integer.parseInt(args[1]), Integer.parseInt(args[2]));
        } else if (args.length == 4 && args[0].equals("client")) {
            System.exit(client(Integer.parseInt(args[1]), Integer.parseInt(args[2]), Long.parseLong(args[3])));
        } else {
            System.err.println("usage: NioEcho server PORT NCONN | client PORT NCONN SIZE");
            System.exit(2);
        }
    }
}
