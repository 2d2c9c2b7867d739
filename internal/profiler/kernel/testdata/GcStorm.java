// A JVM that collects garbage all the time (jvm_bpf_test.go): prints
// "ready", waits for a line on stdin, allocates 16 KiB arrays for the number
// of milliseconds given, keeping the last 1024 (16 MiB live), prints "done".
public class GcStorm {
    public static void main(String[] args) throws Exception {
        System.out.println("ready");
        java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
        in.readLine();
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000L;
        Object[] keep = new Object[1024];
        long n = 0;
        while (System.nanoTime() < end) {
            keep[(int) (n++ & 1023)] = new byte[16 << 10];
        }
        System.out.println("done");
        in.readLine();
    }
}
