/*
 * csvc: uninstrumented HTTP/1.1 service for rootline run's tests, with the
 * contract of svc.py and no tracing code, on raw POSIX sockets.
 *
 * LISTEN=host:port (default 127.0.0.1:0); CALL=http://host:port (optional
 * downstream). A leaf answers with the trace headers it received, one
 * "name: value" line each; a middle service sends "GET <same path>" to CALL
 * on a keep-alive connection of its own (raw HTTP/1.1, Content-Length
 * parsing) and answers with the downstream's body. Prints "listening <port>".
 *
 * MODE=thread (default): one pthread per connection, keep-alive loop.
 * MODE=fork: a forked child serves each connection.
 * MODE=spawn: like thread, but for each request the handler spawns a pthread
 *             that makes the downstream call, then joins it.
 *
 * Requests it cannot parse (bad request line, a header line without a colon,
 * a bad Content-Length, Transfer-Encoding) get a 400 and the connection is
 * closed; a connection closed in the middle of a request gets no answer.
 *
 * Build: gcc -O2 -pthread -o csvc csvc.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

enum { MODE_THREAD, MODE_FORK, MODE_SPAWN };

#define BUFCAP 65536

static int mode = MODE_THREAD;
static int have_call;
static char call_host[256];
static char call_port[16];
static const char *echo_names[] = {"traceparent", "b3", "x-request-id", "x-b3-traceid", "x-b3-spanid"};
#define NECHO 5

/* A buffered reader over a socket. */
struct rd {
	int fd;
	char buf[BUFCAP];
	size_t len;
};

/* One parsed request. */
struct req {
	char target[4096];
	char echo[NECHO][512];
	int keep_alive;
	long content_length;
};

/* The downstream connection of a serving connection (one user at a time). */
struct down {
	int fd;
	struct rd *r;
};

static int write_all(int fd, const char *p, size_t n) {
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* writev of two buffers, completing partial writes. */
static int writev_all(int fd, const char *a, size_t an, const char *b, size_t bn) {
	struct iovec iov[2] = {{(void *)a, an}, {(void *)b, bn}};
	int i = 0, cnt = 2;
	while (i < cnt) {
		ssize_t k = writev(fd, iov + i, cnt - i);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		while (i < cnt && (size_t)k >= iov[i].iov_len) {
			k -= (ssize_t)iov[i].iov_len;
			i++;
		}
		if (i < cnt) {
			iov[i].iov_base = (char *)iov[i].iov_base + k;
			iov[i].iov_len -= (size_t)k;
		}
	}
	return 0;
}

/* fill reads more bytes into r; returns the count, 0 on EOF, -1 on error or
 * a full buffer. */
static ssize_t fill(struct rd *r) {
	if (r->len >= BUFCAP)
		return -1;
	for (;;) {
		ssize_t k = read(r->fd, r->buf + r->len, BUFCAP - r->len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k > 0)
			r->len += (size_t)k;
		return k;
	}
}

static void consume(struct rd *r, size_t n) {
	memmove(r->buf, r->buf + n, r->len - n);
	r->len -= n;
}

/* head reads until a complete header block is buffered; returns its length
 * (including the blank line), 0 on EOF/error before it is complete. */
static size_t head(struct rd *r) {
	for (;;) {
		char *e = memmem(r->buf, r->len, "\r\n\r\n", 4);
		if (e)
			return (size_t)(e - r->buf) + 4;
		if (fill(r) <= 0)
			return 0;
	}
}

/* skip discards n body bytes; 0 on success. */
static int skip(struct rd *r, long n) {
	while (n > 0) {
		if (r->len == 0 && fill(r) <= 0)
			return -1;
		size_t k = r->len < (size_t)n ? r->len : (size_t)n;
		consume(r, k);
		n -= (long)k;
	}
	return 0;
}

static int parse_length(const char *v, long *out) {
	char *end;
	while (*v == ' ' || *v == '\t')
		v++;
	if (*v < '0' || *v > '9')
		return -1;
	errno = 0;
	long n = strtol(v, &end, 10);
	while (*end == ' ' || *end == '\t')
		end++;
	if (errno || *end || n < 0)
		return -1;
	*out = n;
	return 0;
}

/* parse_request parses the header block h (NUL-terminated, CRLF lines).
 * Returns 0 if valid, -1 if not. */
static int parse_request(char *h, struct req *q) {
	memset(q, 0, sizeof *q);
	char *save = NULL;
	char *line = strtok_r(h, "\r\n", &save);
	if (!line)
		return -1;
	/* METHOD SP target SP HTTP/1.x */
	char *sp1 = strchr(line, ' ');
	if (!sp1 || sp1 == line)
		return -1;
	for (char *c = line; c < sp1; c++)
		if (*c < 'A' || *c > 'Z')
			return -1;
	char *target = sp1 + 1;
	char *sp2 = strchr(target, ' ');
	if (!sp2 || sp2 == target || target[0] != '/')
		return -1;
	*sp2 = 0;
	const char *ver = sp2 + 1;
	if (strcmp(ver, "HTTP/1.1") == 0)
		q->keep_alive = 1;
	else if (strcmp(ver, "HTTP/1.0") == 0)
		q->keep_alive = 0;
	else
		return -1;
	if (strlen(target) >= sizeof q->target)
		return -1;
	strcpy(q->target, target);
	for (char *c = q->target; *c; c++)
		if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 127)
			return -1;
	while ((line = strtok_r(NULL, "\r\n", &save)) != NULL) {
		char *colon = strchr(line, ':');
		if (!colon || colon == line)
			return -1;
		for (char *c = line; c < colon; c++)
			if (*c == ' ' || *c == '\t' || (unsigned char)*c < 33 || (unsigned char)*c >= 127)
				return -1;
		*colon = 0;
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		size_t vl = strlen(v);
		while (vl > 0 && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
			v[--vl] = 0;
		if (strcasecmp(line, "content-length") == 0) {
			if (parse_length(v, &q->content_length))
				return -1;
		} else if (strcasecmp(line, "transfer-encoding") == 0) {
			return -1;
		} else if (strcasecmp(line, "connection") == 0) {
			if (strcasecmp(v, "close") == 0)
				q->keep_alive = 0;
			else if (strcasecmp(v, "keep-alive") == 0)
				q->keep_alive = 1;
		} else {
			for (int i = 0; i < NECHO; i++)
				if (strcasecmp(line, echo_names[i]) == 0 && q->echo[i][0] == 0)
					snprintf(q->echo[i], sizeof q->echo[i], "%s", v);
		}
	}
	return 0;
}

static int dial(void) {
	struct addrinfo hints = {0}, *res;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	if (getaddrinfo(call_host, call_port, &hints, &res) != 0)
		return -1;
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd >= 0) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	}
	return fd;
}

static void down_close(struct down *d) {
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}

/* fetch sends GET target to CALL on d's keep-alive connection (dialing or
 * redialing as needed) and returns the body (malloc'd) of a 200 response, or
 * NULL. */
static char *fetch_once(struct down *d, const char *target, size_t *blen, int *fresh) {
	*fresh = 0;
	if (d->fd < 0) {
		d->fd = dial();
		if (d->fd < 0)
			return NULL;
		d->r->fd = d->fd;
		d->r->len = 0;
		*fresh = 1;
	}
	char reqbuf[4608];
	int n = snprintf(reqbuf, sizeof reqbuf, "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: csvc\r\nAccept: */*\r\n\r\n",
	                 target, call_host, call_port);
	if (write_all(d->fd, reqbuf, (size_t)n) != 0)
		return NULL;
	struct rd *r = d->r;
	size_t hl = head(r);
	if (hl == 0)
		return NULL;
	char h[BUFCAP + 1];
	memcpy(h, r->buf, hl);
	h[hl] = 0;
	consume(r, hl);
	int status = 0;
	if (sscanf(h, "HTTP/1.%*d %d", &status) != 1)
		return NULL;
	long cl = -1;
	int close_after = 0;
	char *save = NULL;
	strtok_r(h, "\r\n", &save);
	for (char *line; (line = strtok_r(NULL, "\r\n", &save)) != NULL;) {
		char *colon = strchr(line, ':');
		if (!colon)
			continue;
		*colon = 0;
		char *v = colon + 1;
		while (*v == ' ')
			v++;
		if (strcasecmp(line, "content-length") == 0) {
			if (parse_length(v, &cl))
				return NULL;
		} else if (strcasecmp(line, "connection") == 0 && strncasecmp(v, "close", 5) == 0) {
			close_after = 1;
		}
	}
	char *body;
	size_t len = 0;
	if (cl >= 0) {
		body = malloc((size_t)cl + 1);
		while (len < (size_t)cl) {
			if (r->len == 0 && fill(r) <= 0) {
				free(body);
				return NULL;
			}
			size_t k = r->len < (size_t)cl - len ? r->len : (size_t)cl - len;
			memcpy(body + len, r->buf, k);
			consume(r, k);
			len += k;
		}
	} else { /* until EOF */
		size_t cap = 4096;
		body = malloc(cap);
		close_after = 1;
		for (;;) {
			if (r->len == 0) {
				ssize_t k = fill(r);
				if (k < 0) {
					free(body);
					return NULL;
				}
				if (k == 0)
					break;
			}
			if (len + r->len > cap) {
				cap = (len + r->len) * 2;
				body = realloc(body, cap);
			}
			memcpy(body + len, r->buf, r->len);
			len += r->len;
			r->len = 0;
		}
	}
	if (close_after)
		down_close(d);
	if (status != 200) {
		free(body);
		return NULL;
	}
	*blen = len;
	return body;
}

static char *fetch(struct down *d, const char *target, size_t *blen) {
	int fresh;
	char *b = fetch_once(d, target, blen, &fresh);
	if (!b && !fresh) { /* the kept-alive connection may have been closed */
		down_close(d);
		b = fetch_once(d, target, blen, &fresh);
	}
	if (!b)
		down_close(d);
	return b;
}

struct spawned {
	struct down *d;
	const char *target;
	char *body;
	size_t len;
};

static void *spawned_call(void *arg) {
	struct spawned *s = arg;
	s->body = fetch(s->d, s->target, &s->len);
	return NULL;
}

static void respond(int fd, int status, const char *reason, const char *body, size_t blen, int keep) {
	char h[256];
	int n = snprintf(h, sizeof h, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n%s\r\n", status,
	                 reason, blen, keep ? "" : "Connection: close\r\n");
	writev_all(fd, h, (size_t)n, body, blen);
}

static void serve(int fd) {
	struct rd *in = malloc(sizeof *in);
	struct rd *dr = malloc(sizeof *dr);
	struct down d = {-1, dr};
	struct req *q = malloc(sizeof *q);
	char *h = malloc(BUFCAP + 1);
	in->fd = fd;
	in->len = 0;
	for (;;) {
		size_t hl = head(in);
		if (hl == 0)
			break;
		memcpy(h, in->buf, hl);
		h[hl] = 0;
		consume(in, hl);
		if (parse_request(h, q) != 0) {
			static const char bad[] = "bad request\n";
			respond(fd, 400, "Bad Request", bad, sizeof bad - 1, 0);
			break;
		}
		if (skip(in, q->content_length) != 0)
			break;
		char *body = NULL;
		size_t blen = 0;
		if (have_call) {
			if (mode == MODE_SPAWN) {
				struct spawned s = {&d, q->target, NULL, 0};
				pthread_t th;
				if (pthread_create(&th, NULL, spawned_call, &s) == 0) {
					pthread_join(th, NULL);
					body = s.body;
					blen = s.len;
				}
			} else {
				body = fetch(&d, q->target, &blen);
			}
			if (!body) {
				static const char bad[] = "downstream error\n";
				respond(fd, 502, "Bad Gateway", bad, sizeof bad - 1, q->keep_alive);
				if (!q->keep_alive)
					break;
				continue;
			}
		} else {
			size_t cap = 64;
			for (int i = 0; i < NECHO; i++)
				cap += strlen(echo_names[i]) + strlen(q->echo[i]) + 3;
			body = malloc(cap);
			for (int i = 0; i < NECHO; i++)
				blen += (size_t)sprintf(body + blen, "%s: %s\n", echo_names[i], q->echo[i]);
		}
		respond(fd, 200, "OK", body, blen, q->keep_alive);
		free(body);
		if (!q->keep_alive)
			break;
	}
	down_close(&d);
	close(fd);
	free(in);
	free(dr);
	free(q);
	free(h);
}

static void *conn_thread(void *arg) {
	serve((int)(long)arg);
	return NULL;
}

int main(void) {
	const char *listen_s = getenv("LISTEN");
	const char *call = getenv("CALL");
	const char *m = getenv("MODE");
	if (!listen_s || !*listen_s)
		listen_s = "127.0.0.1:0";
	if (m && strcmp(m, "fork") == 0)
		mode = MODE_FORK;
	else if (m && strcmp(m, "spawn") == 0)
		mode = MODE_SPAWN;
	else if (m && *m && strcmp(m, "thread") != 0) {
		fprintf(stderr, "csvc: MODE must be thread, fork or spawn\n");
		return 2;
	}
	if (call && *call) {
		const char *hp = call;
		if (strncmp(hp, "http://", 7) == 0)
			hp += 7;
		const char *colon = strrchr(hp, ':');
		if (!colon || (size_t)(colon - hp) >= sizeof call_host) {
			fprintf(stderr, "csvc: CALL must be http://host:port\n");
			return 2;
		}
		memcpy(call_host, hp, (size_t)(colon - hp));
		snprintf(call_port, sizeof call_port, "%.*s", (int)strcspn(colon + 1, "/"), colon + 1);
		have_call = 1;
	}
	char host[256];
	const char *colon = strrchr(listen_s, ':');
	if (!colon || (size_t)(colon - listen_s) >= sizeof host) {
		fprintf(stderr, "csvc: LISTEN must be host:port\n");
		return 2;
	}
	memcpy(host, listen_s, (size_t)(colon - listen_s));
	host[colon - listen_s] = 0;
	signal(SIGPIPE, SIG_IGN);
	if (mode == MODE_FORK)
		signal(SIGCHLD, SIG_IGN); /* children are reaped automatically */

	struct sockaddr_in sa = {0};
	sa.sin_family = AF_INET;
	sa.sin_port = htons((unsigned short)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "csvc: LISTEN host must be an IPv4 address\n");
		return 2;
	}
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 128) != 0) {
		perror("csvc: listen");
		return 1;
	}
	socklen_t sl = sizeof sa;
	getsockname(lfd, (struct sockaddr *)&sa, &sl);
	printf("listening %d\n", ntohs(sa.sin_port));
	fflush(stdout);

	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE)
				continue;
			perror("csvc: accept");
			return 1;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (mode == MODE_FORK) {
			pid_t pid = fork();
			if (pid == 0) {
				close(lfd);
				serve(fd);
				_exit(0);
			}
			if (pid < 0)
				perror("csvc: fork");
			close(fd);
			continue;
		}
		pthread_t th;
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		if (pthread_create(&th, &attr, conn_thread, (void *)(long)fd) != 0)
			close(fd);
		pthread_attr_destroy(&attr);
	}
}
