// GCStorm allocates short-lived arrays as fast as it can in a small heap, so
// that the JVM collects many times a second: a JVM whose requests stall in
// garbage-collection pauses. It prints "ready" and runs for the number of
// milliseconds given as its argument (default 2000).
public class GCStorm {
    static volatile Object keep;

    public static void main(String[] args) {
        long ms = args.length > 0 ? Long.parseLong(args[0]) : 2000;
        System.out.println("ready");
        Object[] live = new Object[1024];
        long deadline = System.currentTimeMillis() + ms;
        for (long i = 0; System.currentTimeMillis() < deadline; i++) {
            byte[] b = new byte[1024 + (int) (i % 8192)];
            live[(int) (i % live.length)] = b; // some survive a young collection
            keep = b;
        }
    }
}
