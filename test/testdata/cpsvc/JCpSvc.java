import java.io.InputStream;
import java.io.OutputStream;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;

// JCpSvc is cpsvc.c's contract in Java (test/critpath_test.go): one thread
// per connection, one request per connection, "GET /work?do=<what>&…", the
// answer's body what the handler measured ("key=value" lines, ns).
//
//   do=fast                 nothing (the baseline)
//   do=lock&hold=<ms>       enter the one process-wide monitor, spin <ms> of
//                           wall time inside it; measures lock_wait_ns
//   do=alloc&ms=<ms>        allocate short-lived garbage for <ms> of wall
//                           time; measures gc_ns (the collectors' own
//                           accumulated time over the request, from
//                           GarbageCollectorMXBean, millisecond grain)
//
// LISTEN=host:port (default 127.0.0.1:0); prints "listening <port>".
public class JCpSvc {
    static final Object BIG = new Object();
    static volatile long sink;
    static volatile Object keep;

    static long param(String q, String key, long def) {
        for (String kv : q.split("&")) {
            if (kv.startsWith(key + "=")) {
                return Long.parseLong(kv.substring(key.length() + 1));
            }
        }
        return def;
    }

    static void spinWall(long ms) {
        long end = System.nanoTime() + ms * 1_000_000L;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) {
                sink += i;
            }
        }
    }

    static long gcMillis() {
        long t = 0;
        for (GarbageCollectorMXBean b : ManagementFactory.getGarbageCollectorMXBeans()) {
            t += Math.max(0, b.getCollectionTime());
        }
        return t;
    }

    static void serve(Socket s) {
        try (s) {
            InputStream in = s.getInputStream();
            byte[] buf = new byte[8192];
            int len = 0;
            while (len < buf.length) {
                int r = in.read(buf, len, buf.length - len);
                if (r <= 0) {
                    break;
                }
                len += r;
                if (new String(buf, 0, len, StandardCharsets.ISO_8859_1).contains("\r\n\r\n")) {
                    break;
                }
            }
            String head = new String(buf, 0, len, StandardCharsets.ISO_8859_1);
            String line = head.split("\r\n", 2)[0];
            String target = line.split(" ").length > 1 ? line.split(" ")[1] : "/";
            String q = target.contains("?") ? target.substring(target.indexOf('?') + 1) : "";
            long w0 = System.nanoTime();
            StringBuilder body = new StringBuilder();
            if (q.contains("do=lock")) {
                long t = System.nanoTime();
                synchronized (BIG) {
                    long waited = System.nanoTime() - t;
                    spinWall(param(q, "hold", 1));
                    body.append("lock_wait_ns=").append(waited).append('\n');
                }
            } else if (q.contains("do=alloc")) {
                long g0 = gcMillis();
                long end = System.nanoTime() + param(q, "ms", 1) * 1_000_000L;
                Object[] live = new Object[512];
                for (long i = 0; System.nanoTime() < end; i++) {
                    byte[] b = new byte[1024 + (int) (i % 8192)];
                    live[(int) (i % live.length)] = b;
                    keep = b;
                }
                body.append("gc_ns=").append((gcMillis() - g0) * 1_000_000L).append('\n');
            }
            body.append("wall_ns=").append(System.nanoTime() - w0).append('\n');
            byte[] b = body.toString().getBytes(StandardCharsets.ISO_8859_1);
            OutputStream out = s.getOutputStream();
            out.write(("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + b.length
                    + "\r\nConnection: close\r\n\r\n").getBytes(StandardCharsets.ISO_8859_1));
            out.write(b);
            out.flush();
        } catch (Exception e) {
            System.err.println("JCpSvc: " + e);
        }
    }

    public static void main(String[] args) throws Exception {
        String listen = System.getenv().getOrDefault("LISTEN", "127.0.0.1:0");
        int colon = listen.lastIndexOf(':');
        ServerSocket ss = new ServerSocket();
        ss.bind(new InetSocketAddress(InetAddress.getByName(listen.substring(0, colon)),
                Integer.parseInt(listen.substring(colon + 1))), 128);
        System.out.println("listening " + ss.getLocalPort());
        System.out.flush();
        while (true) {
            Socket s = ss.accept();
            Thread t = new Thread(() -> serve(s));
            t.setDaemon(true);
            t.start();
        }
    }
}
