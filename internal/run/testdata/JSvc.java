// Uninstrumented HTTP service for rootline run's tests, with the contract of
// svc.py and no tracing code: LISTEN=host:port (default 127.0.0.1:0);
// CALL=http://host:port (optional downstream). A leaf answers with the trace
// headers it received, one "name: value" line each; a middle service calls
// CALL with the same path (HttpURLConnection, keep-alive) and answers with the
// downstream's body. com.sun.net.httpserver on a thread pool. Prints
// "listening <port>".
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;

public class JSvc {
    static final String[] ECHO = {"traceparent", "b3", "x-request-id", "x-b3-traceid", "x-b3-spanid"};
    static String call = "";

    public static void main(String[] args) throws Exception {
        System.setProperty("http.maxConnections", "64");
        String listen = System.getenv().getOrDefault("LISTEN", "127.0.0.1:0");
        call = System.getenv().getOrDefault("CALL", "");
        while (call.endsWith("/")) call = call.substring(0, call.length() - 1);
        int i = listen.lastIndexOf(':');
        HttpServer srv = HttpServer.create(
                new InetSocketAddress(listen.substring(0, i), Integer.parseInt(listen.substring(i + 1))), 128);
        srv.setExecutor(Executors.newFixedThreadPool(24));
        srv.createContext("/", JSvc::handle);
        srv.start();
        System.out.println("listening " + srv.getAddress().getPort());
        System.out.flush();
    }

    static void handle(HttpExchange ex) throws IOException {
        try {
            ex.getRequestBody().readAllBytes();
            byte[] body;
            int status = 200;
            if (!call.isEmpty()) {
                try {
                    body = get(call + ex.getRequestURI().toString());
                } catch (IOException e) {
                    status = 502;
                    body = ("downstream: " + e + "\n").getBytes(StandardCharsets.UTF_8);
                }
            } else {
                StringBuilder b = new StringBuilder();
                for (String k : ECHO) {
                    String v = ex.getRequestHeaders().getFirst(k);
                    b.append(k).append(": ").append(v == null ? "" : v).append('\n');
                }
                body = b.toString().getBytes(StandardCharsets.UTF_8);
            }
            ex.getResponseHeaders().set("Content-Type", "text/plain");
            ex.sendResponseHeaders(status, body.length);
            try (OutputStream os = ex.getResponseBody()) {
                os.write(body);
            }
        } finally {
            ex.close();
        }
    }

    static byte[] get(String url) throws IOException {
        HttpURLConnection c = (HttpURLConnection) URI.create(url).toURL().openConnection();
        c.setConnectTimeout(10000);
        c.setReadTimeout(10000);
        int code = c.getResponseCode();
        InputStream in = code >= 400 ? c.getErrorStream() : c.getInputStream();
        byte[] b = in == null ? new byte[0] : in.readAllBytes();
        if (in != null) in.close(); // returns the connection to the keep-alive cache
        if (code != 200) throw new IOException("downstream answered " + code);
        return b;
    }
}
