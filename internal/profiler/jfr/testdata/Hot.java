// Hot is the JVM workload of the jfr package's tests: one thread burns CPU in
// hotLoop, several threads contend on one monitor in contended and two on a
// ReentrantLock in parked, so a JFR recording holds jdk.ExecutionSample,
// jdk.JavaMonitorEnter and jdk.ThreadPark events with known frames. It prints "ready" once every thread runs. With the
// argument "idle" it starts no worker thread, for tests that only need a JVM.
import java.util.concurrent.locks.ReentrantLock;

public class Hot {
    private static final Object LOCK = new Object();
    private static final ReentrantLock PARK_LOCK = new ReentrantLock();
    private static volatile long sink;

    static long hotLoop(long seed) {
        long x = seed;
        for (int i = 0; i < 50_000_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static void contended() throws InterruptedException {
        synchronized (LOCK) {
            // Holding the monitor while sleeping makes every other caller
            // block in monitor enter for tens of milliseconds.
            Thread.sleep(30);
        }
    }

    static void parked() throws InterruptedException {
        // Waiters on a ReentrantLock park in LockSupport.park.
        PARK_LOCK.lock();
        try {
            Thread.sleep(30);
        } finally {
            PARK_LOCK.unlock();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 0 || !args[0].equals("idle")) {
            startWorkers();
        }
        System.out.println("ready");
        System.out.flush();
        // Exit when stdin closes so a dying test never leaves a JVM behind.
        while (System.in.read() != -1) {
        }
    }

    private static void startWorkers() {
        Thread hot = new Thread(() -> {
            long s = 1;
            while (true) {
                s = hotLoop(s);
                sink = s;
            }
        }, "hot");
        hot.setDaemon(true);
        hot.start();
        for (int i = 0; i < 4; i++) {
            Thread c = new Thread(() -> {
                try {
                    while (true) {
                        contended();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "contender-" + i);
            c.setDaemon(true);
            c.start();
        }
        for (int i = 0; i < 2; i++) {
            Thread c = new Thread(() -> {
                try {
                    while (true) {
                        parked();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "parker-" + i);
            c.setDaemon(true);
            c.start();
        }
    }
}
