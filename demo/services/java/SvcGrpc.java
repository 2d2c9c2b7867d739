// SvcGrpc is the gRPC mode of Svc (PROTOCOL=grpc), with grpc-java (Netty, h2c).
//
// One unary method served by a fallback handler registry (no generated code:
// messages are raw bytes, the request ignored, the answer the HTTP mode's body
// text), doing the same work and faults as Svc's HTTP handler on a fixed pool
// of THREADS executor threads (Netty's event loop does the I/O), then calling
// each downstream in order with a blocking call from that thread. A failed
// downstream makes the call fail with UNAVAILABLE (the gRPC status of HTTP's
// 502 Bad Gateway), the body text as its description. Must behave like the
// gRPC modes of main.go (grpc.go) and svc.py (svc_grpc.py).
//
// Build: javac -cp build/demo/java:$HOME/.cache/rootline/grpc-java-1.85.1/'*' -d build/demo/java demo/services/java/SvcGrpc.java
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
import io.grpc.netty.shaded.io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.MetadataUtils;
import io.grpc.stub.ServerCalls;
import io.grpc.stub.StreamObserver;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public final class SvcGrpc {
    // The method the services call downstream (and the demo's load generator
    // calls); a service answers any method the same way.
    static final String METHOD = "rootline.demo.Svc/Call";

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

    static MethodDescriptor<byte[], byte[]> unary(String fullName) {
        return MethodDescriptor.<byte[], byte[]>newBuilder().setType(MethodDescriptor.MethodType.UNARY)
                .setFullMethodName(fullName).setRequestMarshaller(RAW).setResponseMarshaller(RAW).build();
    }

    // The metadata a call came with, for FORWARD_HEADERS.
    static final Context.Key<Metadata> HEADERS = Context.key("headers");

    static final class Downstream {
        final String host;
        final ManagedChannel channel;

        Downstream(String host, ManagedChannel channel) {
            this.host = host;
            this.channel = channel;
        }
    }

    static final List<Downstream> downstreams = new ArrayList<>();

    // target is the host:port of a CALLS URL (http://host:port/path).
    static String target(String u) {
        URI uri = URI.create(u);
        if (uri.getHost() == null || uri.getPort() < 0) {
            throw new IllegalArgumentException("\"" + u + "\": want http://host:port/ or grpc://host:port");
        }
        return uri.getHost() + ":" + uri.getPort();
    }

    public static void serve(String listen, String admin, int threads) throws Exception {
        for (String u : Svc.calls) {
            // One HTTP/2 connection per downstream, its streams multiplexed:
            // what gRPC clients do. Never through a proxy the environment names.
            downstreams.add(new Downstream(Svc.hostOf(u), Grpc.newChannelBuilder(target(u), InsecureChannelCredentials.create())
                    .proxyDetector(a -> null).build()));
        }
        HandlerRegistry registry = new HandlerRegistry() {
            @Override
            public ServerMethodDefinition<?, ?> lookupMethod(String method, String authority) {
                MethodDescriptor<byte[], byte[]> md = unary(method);
                return ServerMethodDefinition.create(md, ServerCalls.asyncUnaryCall(SvcGrpc::call));
            }
        };
        Server server = NettyServerBuilder.forAddress(Svc.addr(listen), InsecureServerCredentials.create())
                .executor(Executors.newFixedThreadPool(threads))
                .fallbackHandlerRegistry(registry)
                .intercept(new ServerInterceptor() {
                    @Override
                    public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> c, Metadata h, ServerCallHandler<Q, R> next) {
                        return Contexts.interceptCall(Context.current().withValue(HEADERS, h), c, h, next);
                    }
                })
                .build();
        server.start();
        System.err.println("svc-java " + Svc.name + " listening on " + listen.substring(0, listen.lastIndexOf(':')) + ":" + server.getPort()
                + " (admin " + admin + "), protocol grpc, calls " + Svc.calls + ", work \"" + Svc.env("WORK", "")
                + "\", forward-headers " + Svc.forward + ", pid " + ProcessHandle.current().pid());
        server.awaitTermination();
    }

    static void call(byte[] req, StreamObserver<byte[]> out) {
        try {
            Svc.requestWork();
        } catch (IOException e) {
            out.onError(Status.INTERNAL.withDescription(e.toString()).asRuntimeException());
            return;
        }
        Metadata in = HEADERS.get();
        Metadata fwd = new Metadata();
        if (Svc.forward && in != null) {
            for (String h : Svc.FORWARDED) {
                Metadata.Key<String> k = Metadata.Key.of(h, Metadata.ASCII_STRING_MARSHALLER);
                String v = in.get(k);
                if (v != null) fwd.put(k, v);
            }
        }
        boolean ok = true;
        StringBuilder parts = new StringBuilder();
        MethodDescriptor<byte[], byte[]> md = unary(METHOD);
        for (Downstream d : downstreams) {
            Channel ch = fwd.keys().isEmpty() ? d.channel
                    : ClientInterceptors.intercept(d.channel, MetadataUtils.newAttachHeadersInterceptor(fwd));
            Status.Code code = Status.Code.OK;
            try {
                ClientCalls.blockingUnaryCall(ch, md, CallOptions.DEFAULT.withDeadlineAfter(30, TimeUnit.SECONDS), new byte[0]);
            } catch (StatusRuntimeException e) {
                code = e.getStatus().getCode();
                ok = false;
            }
            if (parts.length() > 0) parts.append(' ');
            parts.append(d.host).append('=').append(code.value());
        }
        String body = Svc.name + " " + (ok ? "ok" : "fail") + " [" + parts + "]\n";
        if (!ok) {
            out.onError(Status.UNAVAILABLE.withDescription(body).asRuntimeException());
            return;
        }
        out.onNext(body.getBytes(StandardCharsets.UTF_8));
        out.onCompleted();
    }
}
