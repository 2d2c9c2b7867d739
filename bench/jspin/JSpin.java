// JSpin is a CPU-bound JVM benchmark target: after a warm-up it waits for a go
// file, runs a hot method for a fixed time and prints its throughput, so the
// overhead of a continuous JFR recording shows as lost throughput.
public class JSpin {
    static volatile long sink;

    static long hotLoop(long n) {
        long x = 1;
        for (long i = 0; i < n; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            if ((i & 1023) == 0) {
                sink += new long[16].length; // some allocation, as real services do
            }
        }
        return x;
    }

    public static void main(String[] args) throws Exception {
        long seconds = Long.parseLong(args[0]);
        java.nio.file.Path go = java.nio.file.Path.of(args[1]);
        long warm = System.currentTimeMillis() + 3000;
        while (System.currentTimeMillis() < warm) sink += hotLoop(1 << 16);
        System.out.println("ready");
        System.out.flush();
        while (!java.nio.file.Files.exists(go)) Thread.sleep(10);
        long loops = 0, start = System.nanoTime(), end = start + seconds * 1_000_000_000L;
        while (System.nanoTime() < end) { sink += hotLoop(1 << 16); loops++; }
        System.out.printf("loops_per_s=%.1f%n", loops / ((System.nanoTime() - start) / 1e9));
    }
}
