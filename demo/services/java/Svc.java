// Svc is the demo's uninstrumented forwarding service (Java flavour).
//
// It must behave exactly like demo/services/go/main.go and
// demo/services/python/svc.py: same environment contract (SERVICE_NAME, LISTEN,
// CALLS, WORK, FORWARD_HEADERS, ADMIN), same responses, same work and faults. It
// contains no tracing code and, unless FORWARD_HEADERS=1, forwards no trace
// header: complete traces must come from Rootline's syscall supervisor.
//
// Downstream calls use HttpURLConnection on purpose, not java.net.http.HttpClient:
// HttpURLConnection does blocking socket I/O on the request's own thread (as the
// Go and Python flavours do from the handler), so a syscall supervisor sees the
// inbound read and the outbound write on one thread; HttpClient hands the I/O to
// its selector thread. Its keep-alive cache reuses connections (http.maxConnections).
//
// With PROTOCOL=grpc it serves one unary gRPC method instead (SvcGrpc.java,
// grpc-java) with the same work, faults and calls.
//
// Build: javac -d build/demo/java demo/services/java/Svc.java
// Run:   SERVICE_NAME=e LISTEN=127.0.0.1:18005 java -cp build/demo/java Svc
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

public final class Svc {
    // Must match the lists in main.go and svc.py.
    static final String[] FORWARDED = {"traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid",
        "x-b3-parentspanid", "x-b3-sampled", "x-b3-flags", "x-request-id"};
    static final String[][] FAULT_DEFAULTS = {{"lock", "10ms"}, {"hold", "10ms"}, {"gc", "1MB"}, {"slow", "100ms"},
        {"disk", "1MB"}, {"cpu", "10ms"}};

    static final class Work {
        long cpuNs, sleepNs, lockNs, alloc, disk;
    }

    static final class Fault {
        final boolean on;
        final String amount;
        final long ns, bytes;

        Fault(String name, boolean on, String amount) {
            this.on = on;
            this.amount = amount;
            if (name.equals("gc") || name.equals("disk")) {
                this.bytes = parseSize(amount);
                this.ns = 0;
            } else {
                this.ns = parseDur(amount);
                this.bytes = 0;
            }
        }
    }

    static String name;
    static List<String> calls = new ArrayList<>();
    static Work work;
    static boolean forward;
    static final Object HOT = new Object(); // the process-wide lock of lock= work and the lock fault
    static final Map<String, Fault> faults = new LinkedHashMap<>();
    // The gc fault's last 8 allocations stay alive, so young collections have a
    // large live set to copy and promote and old-generation collections follow:
    // GC pauses grow with the storm. Same in main.go and svc.py.
    static final Node[] retained = new Node[8];
    static int retainAt;
    static volatile long sink;

    public static void main(String[] args) throws Exception {
        // Keep enough idle downstream connections per host for the request threads.
        System.setProperty("http.maxConnections", "64");
        System.setProperty("http.keepAlive", "true");
        // The JDK server writes headers and body separately; without
        // TCP_NODELAY, Nagle and the peer's delayed ACK add ~40 ms per hop.
        System.setProperty("sun.net.httpserver.nodelay", "true");
        name = env("SERVICE_NAME", "svc");
        forward = "1".equals(System.getenv("FORWARD_HEADERS"));
        for (String u : env("CALLS", "").split(",")) {
            if (!u.trim().isEmpty()) calls.add(u.trim());
        }
        try {
            work = parseWork(env("WORK", ""));
            for (String[] d : FAULT_DEFAULTS) faults.put(d[0], new Fault(d[0], false, d[1]));
        } catch (IllegalArgumentException e) {
            System.err.println(name + ": WORK: " + e.getMessage());
            System.exit(1);
        }
        String listen = env("LISTEN", "0.0.0.0:8080");
        String admin = env("ADMIN", "127.0.0.1:0");
        int threads = Integer.parseInt(env("THREADS", "64"));

        Thread holder = new Thread(Svc::lockHolder, "lock-holder");
        holder.setDaemon(true);
        holder.start();
        String protocol = env("PROTOCOL", "http");
        if (protocol.equals("grpc")) {
            mainGrpc(listen, admin, threads);
            return;
        }
        if (!protocol.equals("http")) {
            System.err.println(name + ": PROTOCOL \"" + protocol + "\": want http or grpc");
            System.exit(1);
        }

        HttpServer srv = HttpServer.create(addr(listen), 1024);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        srv.setExecutor(pool);
        srv.createContext("/healthz", Svc::healthz);
        srv.createContext("/", Svc::serve);
        srv.start();
        startAdmin(admin);
        System.err.println("svc-java " + name + " listening on " + srv.getAddress().getHostString() + ":" + srv.getAddress().getPort() + " (admin " + admin
            + "), calls " + calls + ", work \"" + env("WORK", "") + "\", forward-headers " + forward
            + ", pid " + ProcessHandle.current().pid());
    }

    static void startAdmin(String admin) throws IOException {
        if (!admin.isEmpty() && !admin.equals("127.0.0.1:0")) {
            HttpServer adm = HttpServer.create(addr(admin), 64);
            adm.setExecutor(Executors.newSingleThreadExecutor());
            adm.createContext("/fault", Svc::setFault);
            adm.createContext("/faults", Svc::listFaults);
            adm.createContext("/healthz", Svc::healthz);
            adm.start();
        }
    }

    // mainGrpc runs the gRPC mode (PROTOCOL=grpc, SvcGrpc.java): one unary
    // method with the same work, faults and calls; the fault API stays
    // HTTP/1. SvcGrpc is compiled against grpc-java (make demo-services) and
    // loaded by name, so that this file still builds and runs in HTTP mode
    // with the JDK alone.
    static void mainGrpc(String listen, String admin, int threads) throws Exception {
        Class<?> c;
        try {
            c = Class.forName("SvcGrpc");
        } catch (ClassNotFoundException | NoClassDefFoundError e) {
            System.err.println(name + ": PROTOCOL=grpc needs SvcGrpc and grpc-java on the class path (make demo-services): " + e);
            System.exit(1);
            return;
        }
        startAdmin(admin);
        c.getMethod("serve", String.class, String.class, int.class).invoke(null, listen, admin, threads);
    }

    static InetSocketAddress addr(String hostPort) {
        int i = hostPort.lastIndexOf(':');
        return new InetSocketAddress(hostPort.substring(0, i), Integer.parseInt(hostPort.substring(i + 1)));
    }

    static String env(String k, String def) {
        String v = System.getenv(k);
        return v == null || v.isEmpty() ? def : v;
    }

    static void reply(HttpExchange ex, int status, String type, String body) throws IOException {
        byte[] b = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", type);
        ex.sendResponseHeaders(status, b.length);
        try (OutputStream os = ex.getResponseBody()) {
            os.write(b);
        }
    }

    static byte[] drain(InputStream in) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        byte[] buf = new byte[8192];
        for (int n; (n = in.read(buf)) > 0; ) out.write(buf, 0, n);
        in.close();
        return out.toByteArray();
    }

    static void healthz(HttpExchange ex) throws IOException {
        drain(ex.getRequestBody());
        reply(ex, 200, "text/plain", "ok\n");
    }

    static void serve(HttpExchange ex) throws IOException {
        try {
            drain(ex.getRequestBody());
            requestWork();

            int status = 200;
            StringBuilder parts = new StringBuilder();
            for (String u : calls) {
                String part;
                try {
                    int code = call(ex, u);
                    if (code < 200 || code > 299) status = 502;
                    part = hostOf(u) + "=" + code;
                } catch (IOException e) {
                    status = 502;
                    part = hostOf(u) + "=ERR";
                }
                if (parts.length() > 0) parts.append(' ');
                parts.append(part);
            }
            reply(ex, status, "text/plain", name + " " + (status == 200 ? "ok" : "fail") + " [" + parts + "]\n");
        } finally {
            ex.close();
        }
    }

    // lockHolder is the lock fault: while it is on, a thread holds the hot
    // lock across a slow call (a sleep of the fault's amount), lets it go for
    // a quarter of that on average, and again; each request takes the lock on its way
    // (requestWork), so requests queue behind the holder: lock contention,
    // not work of their own. Same in main.go and svc.py.
    static void lockHolder() {
        while (true) {
            Fault f;
            synchronized (faults) {
                f = faults.get("lock");
            }
            try {
                if (!f.on || f.ns <= 0) {
                    Thread.sleep(50);
                    continue;
                }
                synchronized (HOT) {
                    Thread.sleep(f.ns / 1_000_000, (int) (f.ns % 1_000_000));
                }
                // Free for a quarter of the hold on average, at random: a
                // fixed cycle would let requests sent one after the other
                // fall into step with it and never wait.
                long free = java.util.concurrent.ThreadLocalRandom.current().nextLong(f.ns / 2 + 1);
                Thread.sleep(free / 1_000_000, (int) (free % 1_000_000));
            } catch (InterruptedException e) {
                return;
            }
        }
    }

    // requestWork does one request's WORK plus the faults that are on, on the
    // calling thread: the same for an HTTP request and a gRPC call.
    static void requestWork() throws IOException {
        Map<String, Fault> f;
        synchronized (faults) {
            f = new LinkedHashMap<>(faults);
        }
        Work wk = new Work();
        wk.cpuNs = work.cpuNs + (f.get("cpu").on ? f.get("cpu").ns : 0);
        wk.sleepNs = work.sleepNs + (f.get("slow").on ? f.get("slow").ns : 0);
        // hold: busy work while holding the hot lock.
        wk.lockNs = work.lockNs + (f.get("hold").on ? f.get("hold").ns : 0);
        if (f.get("lock").on) {
            // The hot lock is held by lockHolder most of the time: the
            // request waits for it.
            synchronized (HOT) {
                // An empty critical section: the wait is the point.
            }
        }
        wk.alloc = work.alloc;
        wk.disk = work.disk + (f.get("disk").on ? f.get("disk").bytes : 0);
        doWork(wk);
        if (f.get("gc").on) gcStorm(f.get("gc").bytes);
    }

    static int call(HttpExchange in, String u) throws IOException {
        HttpURLConnection c = (HttpURLConnection) new URL(u).openConnection(java.net.Proxy.NO_PROXY);
        c.setConnectTimeout(5000);
        c.setReadTimeout(30000);
        c.setRequestMethod("GET");
        if (forward) {
            for (String h : FORWARDED) {
                String v = in.getRequestHeaders().getFirst(h);
                if (v != null) c.setRequestProperty(h, v);
            }
        }
        int code = c.getResponseCode();
        // Read the body to its end and close the stream (not disconnect) so the
        // connection returns to the keep-alive cache.
        InputStream body = code >= 400 ? c.getErrorStream() : c.getInputStream();
        if (body != null) drain(body);
        return code;
    }

    // hostOf names a downstream in the response body: its host without the port.
    static String hostOf(String u) {
        String h = u.replaceFirst("^https?://", "");
        int i = h.indexOf('/');
        if (i >= 0) h = h.substring(0, i);
        i = h.lastIndexOf(':');
        if (i >= 0 && !h.endsWith("]")) h = h.substring(0, i);
        return h;
    }

    static void doWork(Work wk) throws IOException {
        spin(wk.cpuNs);
        if (wk.lockNs > 0) {
            synchronized (HOT) {
                spin(wk.lockNs);
            }
        }
        if (wk.alloc > 0) allocDrop(wk.alloc);
        if (wk.disk > 0) writeSync(wk.disk);
        if (wk.sleepNs > 0) {
            try {
                Thread.sleep(wk.sleepNs / 1_000_000, (int) (wk.sleepNs % 1_000_000));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    // The calling thread's CPU clock (clock_gettime(CLOCK_THREAD_CPUTIME_ID)
    // on Linux, a few hundred ns per read), when the JVM offers it.
    static final java.lang.management.ThreadMXBean THREADS =
        java.lang.management.ManagementFactory.getThreadMXBean();
    static final boolean THREAD_CPU = THREADS.isCurrentThreadCpuTimeSupported() && THREADS.isThreadCpuTimeEnabled();

    // spin burns ns of CPU time on the calling thread: time the thread spends
    // on a CPU, read from its CPU clock, not wall time. A CPU quota, a busy
    // neighbour or other requests of the same process then stretch the
    // request as they stretch real CPU-bound code (the wall time grows, the
    // CPU time per request stays ns). Must match main.go and svc.py. A
    // stop-the-world pause stops the thread's clock too.
    static void spin(long ns) {
        if (ns <= 0) return;
        if (!THREAD_CPU) {
            spinWall(ns);
            return;
        }
        long end = THREADS.getCurrentThreadCpuTime() + ns;
        long x = 1;
        do {
            // About 2 µs of work between reads of the clock: the spin
            // overshoots ns by at most that.
            for (int i = 0; i < 2000; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        } while (THREADS.getCurrentThreadCpuTime() < end);
        sink = x;
    }

    // spinWall burns CPU for ns of wall time, for JVMs without a thread CPU clock.
    static void spinWall(long ns) {
        long end = System.nanoTime() + ns;
        long x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 1000; i++) x = x * 6364136223846793005L + 1442695040888963407L;
        }
        sink = x;
    }

    static void allocDrop(long n) {
        List<byte[]> keep = new ArrayList<>();
        while (n > 0) {
            byte[] b = new byte[(int) Math.min(n, 4096)];
            b[0] = 1;
            keep.add(b);
            n -= b.length;
        }
        sink = keep.size();
    }

    // gcStorm allocates n bytes as a chain of small objects (~64 bytes each
    // with the array) and keeps it alive until 8 later storms replace it.
    static final class Node {
        Node next;
        final byte[] buf = new byte[24];
    }

    static void gcStorm(long n) {
        Node head = null;
        for (long i = 0; i < n / 64; i++) {
            Node nd = new Node();
            nd.next = head;
            head = nd;
        }
        synchronized (retained) {
            retained[retainAt++ % retained.length] = head;
        }
    }

    static void writeSync(long n) throws IOException {
        File f = File.createTempFile("svc-disk-", null);
        try (FileOutputStream out = new FileOutputStream(f)) {
            byte[] buf = new byte[64 << 10];
            while (n > 0) {
                int m = (int) Math.min(n, buf.length);
                out.write(buf, 0, m);
                n -= m;
            }
            out.getFD().sync();
        } finally {
            f.delete();
        }
    }

    static final Pattern NAME = Pattern.compile("\"name\"\\s*:\\s*\"([^\"]*)\"");
    static final Pattern ON = Pattern.compile("\"on\"\\s*:\\s*(true|false)");
    static final Pattern AMOUNT = Pattern.compile("\"amount\"\\s*:\\s*\"([^\"]*)\"");

    static void setFault(HttpExchange ex) throws IOException {
        try {
            if (!ex.getRequestMethod().equals("POST")) {
                reply(ex, 405, "text/plain", "POST only\n");
                return;
            }
            // A minimal reader for {"name": "...", "on": bool, "amount": "..."}: the
            // JDK has no JSON parser and the service must have no dependencies.
            String body = new String(drain(ex.getRequestBody()), StandardCharsets.UTF_8);
            Matcher mn = NAME.matcher(body), mo = ON.matcher(body), ma = AMOUNT.matcher(body);
            String fname = mn.find() ? mn.group(1) : "";
            boolean on = mo.find() && mo.group(1).equals("true");
            synchronized (faults) {
                if (!faults.containsKey(fname)) {
                    reply(ex, 400, "text/plain", "unknown fault \"" + fname + "\": want lock, hold, gc, slow, disk or cpu\n");
                    return;
                }
                String amount = ma.find() && !ma.group(1).isEmpty() ? ma.group(1) : faults.get(fname).amount;
                try {
                    faults.put(fname, new Fault(fname, on, amount));
                } catch (IllegalArgumentException e) {
                    reply(ex, 400, "text/plain", "fault " + fname + ": amount: " + e.getMessage() + "\n");
                    return;
                }
            }
            listFaults(ex);
        } finally {
            ex.close();
        }
    }

    static void listFaults(HttpExchange ex) throws IOException {
        StringBuilder b = new StringBuilder("{");
        synchronized (faults) {
            for (Map.Entry<String, Fault> e : faults.entrySet()) {
                if (b.length() > 1) b.append(',');
                b.append('"').append(e.getKey()).append("\":{\"on\":").append(e.getValue().on)
                    .append(",\"amount\":\"").append(e.getValue().amount).append("\"}");
            }
        }
        reply(ex, 200, "application/json", b.append("}\n").toString());
    }

    // parseWork reads "cpu=2ms,sleep=0ms,lock=0ms,alloc=0KB,disk=0KB".
    static Work parseWork(String s) {
        Work wk = new Work();
        for (String kv : s.split(",")) {
            kv = kv.trim();
            if (kv.isEmpty()) continue;
            int i = kv.indexOf('=');
            if (i < 0) throw new IllegalArgumentException("\"" + kv + "\": want key=value");
            String k = kv.substring(0, i).trim(), v = kv.substring(i + 1);
            try {
                switch (k) {
                    case "cpu": wk.cpuNs = parseDur(v); break;
                    case "sleep": wk.sleepNs = parseDur(v); break;
                    case "lock": wk.lockNs = parseDur(v); break;
                    case "alloc": wk.alloc = parseSize(v); break;
                    case "disk": wk.disk = parseSize(v); break;
                    default:
                        throw new IllegalStateException("unknown key \"" + k + "\": want cpu, sleep, lock, alloc or disk");
                }
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException(k + ": " + e.getMessage());
            } catch (IllegalStateException e) {
                throw new IllegalArgumentException(e.getMessage());
            }
        }
        return wk;
    }

    // parseDur accepts a number with unit us, ms or s (a bare number is ms); returns ns.
    static long parseDur(String s) {
        s = s.trim();
        double mul = 1e6;
        if (s.endsWith("us")) { mul = 1e3; s = s.substring(0, s.length() - 2); }
        else if (s.endsWith("ms")) { mul = 1e6; s = s.substring(0, s.length() - 2); }
        else if (s.endsWith("s")) { mul = 1e9; s = s.substring(0, s.length() - 1); }
        try {
            double v = Double.parseDouble(s);
            if (v < 0) throw new NumberFormatException();
            return (long) (v * mul);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad duration \"" + s + "\" (want e.g. 20ms)");
        }
    }

    // parseSize accepts a number with unit B, KB, MB or GB (powers of 1024; a bare number is bytes).
    static long parseSize(String s) {
        s = s.trim().toUpperCase(Locale.ROOT);
        double mul = 1;
        if (s.endsWith("KB")) { mul = 1 << 10; s = s.substring(0, s.length() - 2); }
        else if (s.endsWith("MB")) { mul = 1 << 20; s = s.substring(0, s.length() - 2); }
        else if (s.endsWith("GB")) { mul = 1 << 30; s = s.substring(0, s.length() - 2); }
        else if (s.endsWith("B")) { s = s.substring(0, s.length() - 1); }
        try {
            double v = Double.parseDouble(s);
            if (v < 0) throw new NumberFormatException();
            return (long) (v * mul);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("bad size \"" + s + "\" (want e.g. 64KB)");
        }
    }
}
