import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ClientInterceptors;
import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.Grpc;
import io.grpc.HandlerRegistry;
import io.grpc.InsecureChannelCredentials;
import io.grpc.InsecureServerCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Server;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.ServerMethodDefinition;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.Iterator;
import java.util.concurrent.TimeUnit;

/**
 * An uninstrumented gRPC service (grpc-java, Netty, h2c) for rootline run's
 * tests, with the contract of grpcsvc/main.go and grpcsvc.py and no tracing
 * code: LISTEN=host:port (default 127.0.0.1:0); CALL=host:port (optional
 * downstream). Every method is served by one fallback handler registry (no
 * generated code: messages are raw bytes) on grpc-java's default executor,
 * Netty's event loop doing the I/O. A leaf answers with the trace metadata
 * it received, one "name: value" line each; a middle service calls CALL with
 * the same method and message and answers with the downstream's answer. The
 * message is a command: "fail" (the leaf answers INTERNAL), "sleep=MS",
 * "meta=N" (a middle service adds N bytes of metadata to its call). A method
 * whose name ends in "Stream" is server-streaming: the leaf sends three
 * messages. It prints "listening PORT".
 */
public final class GrpcSvc {
    static final String[] ECHO = {"traceparent", "tracestate", "b3"};

    static final MethodDescriptor.Marshaller<byte[]> RAW = new MethodDescriptor.Marshaller<>() {
        @Override
        public InputStream stream(byte[] value) {
            return new ByteArrayInputStream(value);
        }

        @Override
        public byte[] parse(InputStream in) {
            try {
                return in.readAllBytes();
            } catch (IOException e) {
                throw Status.INTERNAL.withCause(e).asRuntimeException();
            }
        }
    };

    static MethodDescriptor<byte[], byte[]> method(String name) {
        MethodDescriptor.MethodType type = name.endsWith("Stream")
                ? MethodDescriptor.MethodType.SERVER_STREAMING : MethodDescriptor.MethodType.UNARY;
        return MethodDescriptor.<byte[], byte[]>newBuilder().setType(type).setFullMethodName(name)
                .setRequestMarshaller(RAW).setResponseMarshaller(RAW).build();
    }

    public static void main(String[] args) throws Exception {
        String listen = System.getenv().getOrDefault("LISTEN", "127.0.0.1:0");
        String call = System.getenv("CALL");
        ManagedChannel channel = call == null || call.isEmpty() ? null
                : Grpc.newChannelBuilder(call, InsecureChannelCredentials.create()).proxyDetector(a -> null).build();
        int colon = listen.lastIndexOf(':');
        HandlerRegistry registry = new HandlerRegistry() {
            @Override
            public ServerMethodDefinition<?, ?> lookupMethod(String name, String authority) {
                MethodDescriptor<byte[], byte[]> md = method(name);
                ServerCallHandler<byte[], byte[]> h = md.getType() == MethodDescriptor.MethodType.UNARY
                        ? ServerCalls.asyncUnaryCall((req, out) -> serve(channel, md, req, out))
                        : ServerCalls.asyncServerStreamingCall((req, out) -> serve(channel, md, req, out));
                return ServerMethodDefinition.create(md, h);
            }
        };
        // The metadata a call came with, for the leaf's answer.
        Server server = Grpc.newServerBuilderForPort(Integer.parseInt(listen.substring(colon + 1)), InsecureServerCredentials.create())
                .fallbackHandlerRegistry(registry)
                .intercept(new ServerInterceptor() {
                    @Override
                    public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> c, Metadata h, ServerCallHandler<Q, R> next) {
                        return Contexts.interceptCall(Context.current().withValue(HEADERS, h), c, h, next);
                    }
                })
                .build();
        server.start();
        System.out.println("listening " + server.getPort());
        System.out.flush();
        server.awaitTermination();
    }

    static final Context.Key<Metadata> HEADERS = Context.key("headers");

    static void serve(ManagedChannel channel, MethodDescriptor<byte[], byte[]> md, byte[] req, StreamObserver<byte[]> out) {
        String msg = new String(req, StandardCharsets.UTF_8);
        try {
            if (channel == null) {
                if (msg.startsWith("sleep=")) {
                    Thread.sleep(Long.parseLong(msg.substring(6)));
                }
                if (msg.equals("fail")) {
                    out.onError(Status.INTERNAL.withDescription("asked to fail").asRuntimeException());
                    return;
                }
                Metadata h = HEADERS.get();
                StringBuilder b = new StringBuilder("path: " + md.getFullMethodName() + "\n");
                for (String k : ECHO) {
                    Iterable<String> vs = h == null ? null : h.getAll(Metadata.Key.of(k, Metadata.ASCII_STRING_MARSHALLER));
                    b.append(k).append(": ").append(vs == null ? "" : String.join(",", vs)).append("\n");
                }
                byte[] answer = b.toString().getBytes(StandardCharsets.UTF_8);
                int n = md.getType() == MethodDescriptor.MethodType.UNARY ? 1 : 3;
                for (int i = 0; i < n; i++) {
                    out.onNext(answer);
                }
                out.onCompleted();
                return;
            }
            Channel ch = channel;
            if (msg.startsWith("meta=")) {
                Metadata extra = new Metadata();
                extra.put(Metadata.Key.of("x-big", Metadata.ASCII_STRING_MARSHALLER), "m".repeat(Integer.parseInt(msg.substring(5))));
                ch = ClientInterceptors.intercept(channel, MetadataUtils.newAttachHeadersInterceptor(extra));
            }
            CallOptions opts = CallOptions.DEFAULT.withDeadlineAfter(20, TimeUnit.SECONDS);
            if (md.getType() == MethodDescriptor.MethodType.UNARY) {
                out.onNext(ClientCalls.blockingUnaryCall(ch, md, opts, req));
            } else {
                Iterator<byte[]> it = ClientCalls.blockingServerStreamingCall(ch, md, opts, req);
                while (it.hasNext()) {
                    out.onNext(it.next());
                }
            }
            out.onCompleted();
        } catch (StatusRuntimeException e) {
            out.onError(e.getStatus().asRuntimeException());
        } catch (InterruptedException e) {
            out.onError(Status.CANCELLED.asRuntimeException());
        }
    }
}
