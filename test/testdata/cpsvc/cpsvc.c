/*
 * cpsvc: an uninstrumented HTTP/1.1 service with ground truth for the
 * critical-path tests (test/critpath_test.go). One pthread per connection,
 * one request per connection (Connection: close). Every request is
 * "GET /work?do=<what>&…" so that the anomaly detector sees one operation;
 * the answer's body is what the handler measured itself ("key=value" lines,
 * nanoseconds), which the tests compare with the critical path.
 *
 *   do=fast                     nothing (the baseline)
 *   do=lock&hold=<ms>           lock the one process-wide pthread mutex, spin
 *                               <ms> of wall time holding it, unlock;
 *                               measures lock_wait_ns (time in
 *                               pthread_mutex_lock)
 *   do=spin&ms=<ms>             spin until the thread used <ms> of CPU;
 *                               measures cpu_ns
 *   do=fsync&n=<n>&kb=<kb>      n times: write <kb> KiB to a file in $DIR and
 *                               fsync it; measures fsync_ns (time in fsync)
 *                               and io_ns (in write and fsync)
 *   do=sleep&ms=<ms>            clock_nanosleep <ms>; measures sleep_ns
 *   do=call&ms=<ms>             GET /work?do=sleep&ms=<ms> from $CALL
 *                               (host:port) on a new connection; measures
 *                               call_ns (connect to the last byte)
 *
 * Every answer also carries wall_ns and cpu_ns (the thread's CPU time for
 * the request). LISTEN=host:port (default 127.0.0.1:0); prints
 * "listening <port>".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static const char *dir = "/tmp";
static char call_host[64] = "127.0.0.1";
static int call_port;
static volatile unsigned long sink;

static long long clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
static long long cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

/* param returns the integer value of key in the query, or def. */
static long param(const char *q, const char *key, long def)
{
	size_t n = strlen(key);
	for (const char *p = q; p && *p; p = strchr(p, '&')) {
		if (*p == '&' || *p == '?')
			p++;
		if (strncmp(p, key, n) == 0 && p[n] == '=')
			return atol(p + n + 1);
	}
	return def;
}

static int has(const char *q, const char *kv) { return strstr(q, kv) != NULL; }

static void spin_wall(long ms)
{
	long long end = now_ns() + ms * 1000000LL;
	while (now_ns() < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

static void spin_cpu(long ms)
{
	long long end = cpu_ns() + ms * 1000000LL;
	while (cpu_ns() < end)
		for (int i = 0; i < 1000; i++)
			sink += i;
}

static int write_all(int fd, const char *b, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* call_down makes the downstream call; returns its duration or -1. */
static long long call_down(long ms)
{
	long long t0 = now_ns();
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(call_port)};
	inet_pton(AF_INET, call_host, &a.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	char req[256];
	int n = snprintf(req, sizeof req, "GET /work?do=sleep&ms=%ld HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n", ms, call_host, call_port);
	if (write_all(fd, req, (size_t)n) < 0) {
		close(fd);
		return -1;
	}
	char buf[4096];
	while (read(fd, buf, sizeof buf) > 0)
		;
	close(fd);
	return now_ns() - t0;
}

static void *serve(void *arg)
{
	int fd = (int)(long)arg;
	char buf[8192];
	size_t len = 0;
	while (len < sizeof buf - 1) {
		ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = 0;
		if (strstr(buf, "\r\n\r\n"))
			break;
	}
	buf[len] = 0;
	char *q = strchr(buf, '?');
	char *eol = strstr(buf, " HTTP/");
	if (eol)
		*eol = 0;
	if (!q)
		q = "";
	long long w0 = now_ns(), c0 = cpu_ns();
	char body[512];
	int bn = 0;
	if (has(q, "do=lock")) {
		long long t = now_ns();
		pthread_mutex_lock(&big);
		long long waited = now_ns() - t;
		spin_wall(param(q, "hold", 1));
		pthread_mutex_unlock(&big);
		bn += snprintf(body + bn, sizeof body - bn, "lock_wait_ns=%lld\n", waited);
	} else if (has(q, "do=spin")) {
		spin_cpu(param(q, "ms", 1));
	} else if (has(q, "do=fsync")) {
		char path[512];
		snprintf(path, sizeof path, "%s/cpsvc-%d-%lu.dat", dir, getpid(), (unsigned long)pthread_self());
		int f = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		long kb = param(q, "kb", 256), n = param(q, "n", 1);
		char *data = calloc((size_t)kb, 1024);
		long long in_fsync = 0, in_io = 0;
		for (long i = 0; f >= 0 && data && i < n; i++) {
			memset(data, (int)i, (size_t)kb * 1024);
			long long t = now_ns();
			write_all(f, data, (size_t)kb * 1024);
			long long t2 = now_ns();
			fsync(f);
			in_fsync += now_ns() - t2;
			in_io += now_ns() - t;
		}
		free(data);
		if (f >= 0)
			close(f);
		unlink(path);
		bn += snprintf(body + bn, sizeof body - bn, "fsync_ns=%lld\nio_ns=%lld\n", in_fsync, in_io);
	} else if (has(q, "do=sleep")) {
		long long t = now_ns();
		struct timespec ts = {.tv_sec = param(q, "ms", 1) / 1000, .tv_nsec = (param(q, "ms", 1) % 1000) * 1000000L};
		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
		bn += snprintf(body + bn, sizeof body - bn, "sleep_ns=%lld\n", now_ns() - t);
	} else if (has(q, "do=call")) {
		bn += snprintf(body + bn, sizeof body - bn, "call_ns=%lld\n", call_down(param(q, "ms", 1)));
	}
	bn += snprintf(body + bn, sizeof body - bn, "wall_ns=%lld\ncpu_ns=%lld\n", now_ns() - w0, cpu_ns() - c0);
	char head[256];
	int hn = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", bn);
	write_all(fd, head, (size_t)hn);
	write_all(fd, body, (size_t)bn);
	close(fd);
	return NULL;
}

int main(void)
{
	const char *listen_s = getenv("LISTEN");
	if (getenv("DIR"))
		dir = getenv("DIR");
	const char *call = getenv("CALL");
	if (call) {
		const char *colon = strrchr(call, ':');
		if (colon && (size_t)(colon - call) < sizeof call_host) {
			memcpy(call_host, call, (size_t)(colon - call));
			call_host[colon - call] = 0;
			call_port = atoi(colon + 1);
		}
	}
	char host[64] = "127.0.0.1";
	int port = 0;
	if (listen_s) {
		const char *colon = strrchr(listen_s, ':');
		if (colon && (size_t)(colon - listen_s) < sizeof host) {
			memcpy(host, listen_s, (size_t)(colon - listen_s));
			host[colon - listen_s] = 0;
			port = atoi(colon + 1);
		}
	}
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, host, &a.sin_addr);
	if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 128) < 0) {
		perror("cpsvc: listen");
		return 1;
	}
	socklen_t al = sizeof a;
	getsockname(ls, (struct sockaddr *)&a, &al);
	printf("listening %d\n", ntohs(a.sin_port));
	fflush(stdout);
	for (;;) {
		int fd = accept(ls, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR)
				continue;
			perror("cpsvc: accept");
			return 1;
		}
		pthread_t th;
		pthread_attr_t at;
		pthread_attr_init(&at);
		pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &at, serve, (void *)(long)fd) != 0)
			close(fd);
		pthread_attr_destroy(&at);
	}
}
